package kubetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// The shipped node identity and the admission policy that narrows its
// writes to its own node (deploy/policy-node-writes.yaml).
const (
	NodeNamespace      = "kube-system"
	NodeServiceAccount = "ipkeeper-node"
	NodeWritesPolicy   = "ipkeeper-node-writes"
	// NodeNameExtra is the user extra in which the API server puts the
	// node of a token bound to a pod.
	NodeNameExtra = "authentication.kubernetes.io/node-name"
)

var ipamNodes = schema.GroupVersionResource{Group: "ipkeeper.io", Version: "v1beta1", Resource: "ipamnodes"}

// waitPolicies waits until the node-writes policy among objs (if any) is
// in force: the API server loads admission policies asynchronously, so a
// test that starts right after the apply would otherwise race it. The
// probe is a dry-run create of an IPAMNode as the node ServiceAccount
// without a node, which the policy refuses.
func (s *Server) waitPolicies(ctx context.Context, objs []*unstructured.Unstructured) error {
	found := false
	for _, o := range objs {
		found = found || o.GetKind() == "ValidatingAdmissionPolicy" && o.GetName() == NodeWritesPolicy
	}
	if !found {
		return nil
	}
	cfg := rest.CopyConfig(s.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + NodeNamespace + ":" + NodeServiceAccount,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + NodeNamespace, "system:authenticated"}}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipkeeper.io/v1beta1", "kind": "IPAMNode",
		"metadata": map[string]any{"name": "kubetest-policy-probe"},
		"spec":     map[string]any{"node": "kubetest-policy-probe"},
	}}
	var last error
	for {
		_, err := dyn.Resource(ipamNodes).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), NodeWritesPolicy) {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubetest: ValidatingAdmissionPolicy %s not in force (last answer to a node write without a node: %v): %w", NodeWritesPolicy, last, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// NodePodName is the Pod that NodeKubeconfig binds node's token to.
func NodePodName(node string) string { return "ipkeeper-node-" + node }

// NodeToken returns a token of the ipkeeper-node ServiceAccount bound to a
// Pod bound to node, as the kubelet projects into the DaemonSet's pod on
// that node: the API server puts the node in the user's extra
// (NodeNameExtra). The Pod (NodePodName, in kube-system) is created when
// missing; node need not exist as a Node. Deleting the Pod invalidates
// the token.
func (s *Server) NodeToken(t testing.TB, node string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tok, err := s.nodeToken(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (s *Server) nodeToken(ctx context.Context, node string) (string, error) {
	if _, err := s.serviceAccountToken(ctx, NodeNamespace, NodeServiceAccount); err != nil {
		return "", err // creates the ServiceAccount when deploy/ has none
	}
	pods := s.Client.CoreV1().Pods(NodeNamespace)
	name := NodePodName(node)
	pod, err := pods.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		pod, err = pods.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/name": "kubetest-node"}},
			// Host network, as the DaemonSet's pod: on a node with a real
			// kubelet it gets no address from the CNI plugin it stands for.
			Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: NodeServiceAccount, HostNetwork: true,
				Containers: []corev1.Container{{Name: "agent", Image: "example.invalid/ipkeeper"}}},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			pod, err = pods.Get(ctx, name, metav1.GetOptions{})
		}
	}
	if err != nil {
		return "", fmt.Errorf("kubetest: Pod %s/%s of node %s: %w", NodeNamespace, name, node, err)
	}
	if pod.Spec.NodeName != node || pod.Spec.ServiceAccountName != NodeServiceAccount {
		return "", fmt.Errorf("kubetest: Pod %s/%s runs as %q on node %q, not as %s on %s", NodeNamespace, name,
			pod.Spec.ServiceAccountName, pod.Spec.NodeName, NodeServiceAccount, node)
	}
	secs := int64(tokenLifetime / time.Second)
	tr, err := s.Client.CoreV1().ServiceAccounts(NodeNamespace).CreateToken(ctx, NodeServiceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs,
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("kubetest: TokenRequest bound to Pod %s/%s: %w", NodeNamespace, name, err)
	}
	return tr.Status.Token, nil
}

// NodeKubeconfig writes a kubeconfig for node's ipkeeper-node credentials
// (NodeToken) and returns its path, inside the server's directory: what
// the installer writes on that node. The shipped RBAC and the node-writes
// policy decide what it may do.
func (s *Server) NodeKubeconfig(t testing.TB, node string) string {
	t.Helper()
	f, err := os.CreateTemp(s.Dir, "node-*.kubeconfig")
	if err != nil {
		t.Fatal(err)
	}
	path := f.Name()
	f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.WriteNodeKubeconfig(ctx, path, node); err != nil {
		t.Fatal(err)
	}
	return filepath.Clean(path)
}

// WriteNodeKubeconfig is NodeKubeconfig for programs without a testing.TB
// (benchmarks): it writes the kubeconfig at path.
func (s *Server) WriteNodeKubeconfig(ctx context.Context, path, node string) error {
	tok, err := s.nodeToken(ctx, node)
	if err != nil {
		return err
	}
	ca, err := os.ReadFile(s.CAFile)
	if err != nil {
		return err
	}
	return writeKubeconfig(path, s.URL, ca, "system:serviceaccount:"+NodeNamespace+":"+NodeServiceAccount, tok)
}
