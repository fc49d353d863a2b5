package node

import (
	"context"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kubeletAccount is the ServiceAccount the kubelets authenticate as,
// bound to the built-in ClusterRole system:node (what a kubelet may do
// under RBAC; the API server has no client certificate authority for
// node credentials here).
const kubeletAccount = "ipkn-kubelet"

// kubeletConfig is the kubelet's configuration. The host is cgroup v1
// (failCgroupV1: false, the cgroupfs driver, no QoS cgroups, no node
// allocatable enforcement) without swap accounting; eviction and image
// garbage collection are off (a busy CI machine must not evict the
// tests' pods, and the pause image cannot be pulled again); its API
// listens on loopback only.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
containerRuntimeEndpoint: unix://%[1]s
address: 127.0.0.1
port: %[2]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[3]d
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
podLogsDir: %[4]s
resolvConf: ""
evictionHard:
  memory.available: "0%%"
  nodefs.available: "0%%"
  nodefs.inodesFree: "0%%"
  imagefs.available: "0%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
nodeStatusUpdateFrequency: 4s
syncFrequency: 10s
`

// kubeletKubeconfig writes the kubeconfig of kubeletAccount, creating
// the account and its binding to system:node when missing.
func (n *node) kubeletKubeconfig(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: kubeletAccount},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:node"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "kube-system", Name: kubeletAccount}},
	}
	if _, err := n.srv.Client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return n.srv.ServiceAccountKubeconfig(t, "kube-system", kubeletAccount)
}

// startKubelet starts the kubelet (in the machine's network namespace:
// its pods have namespaces of their own) registered as n.name.
func (n *node) startKubelet(t *testing.T) {
	t.Helper()
	conf := fmt.Sprintf(kubeletConfig, n.criSocket, freePort(t), freePort(t), n.path("pod-logs"))
	if err := os.WriteFile(n.path("kubelet.yaml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if n.kubeletKC == "" {
		n.kubeletKC = n.kubeletKubeconfig(t)
	}
	n.kubelet = startProc(t, "kubelet", n.path("kubelet.log"), nil,
		n.tools.kubelet, "--config", n.path("kubelet.yaml"), "--kubeconfig", n.kubeletKC,
		"--root-dir", n.path("kubelet"), "--cert-dir", n.path("kubelet/pki"), "--hostname-override", n.name, "--v", "2")
	n.waitFor(t, "the kubelet registers Node "+n.name, 3*time.Minute, func() (bool, string) {
		if !n.kubelet.running() {
			t.Fatalf("kubelet exited:\n%s", n.kubelet.tail(60))
		}
		_, err := n.srv.Client.CoreV1().Nodes().Get(context.Background(), n.name, metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
}

// restartKubelet starts the kubelet again after it was stopped.
func (n *node) restartKubelet(t *testing.T) {
	t.Helper()
	n.startKubelet(t)
}

// nodeReady is the Node's Ready condition and its message.
func (n *node) nodeReady() (bool, string) {
	nd, err := n.srv.Client.CoreV1().Nodes().Get(context.Background(), n.name, metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	for _, c := range nd.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue, c.Reason + ": " + c.Message
		}
	}
	return false, "no Ready condition"
}

// waitNodeReady waits until the Node is Ready.
func (n *node) waitNodeReady(t *testing.T, timeout time.Duration) {
	t.Helper()
	n.waitFor(t, "Node "+n.name+" is Ready", timeout, func() (bool, string) {
		if !n.kubelet.running() {
			t.Fatalf("kubelet exited:\n%s", n.kubelet.tail(60))
		}
		return n.nodeReady()
	})
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
