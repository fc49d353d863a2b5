package kubetest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func clientFor(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestServer starts a real kube-apiserver and checks that RBAC is really
// enforced (an authenticated ServiceAccount with no binding is refused,
// while the admin may do anything) and that Pods behave as the other
// Kubernetes tests assume without a kubelet.
func TestServer(t *testing.T) {
	s := Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("unbound ServiceAccount is authenticated but refused", func(t *testing.T) {
		cs := clientFor(t, s.ServiceAccountKubeconfig(t, "default", "kubetest-unbound"))
		// Authentication works: the server knows who we are.
		rev, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("SelfSubjectReview: %v", err)
		}
		if got, want := rev.Status.UserInfo.Username, "system:serviceaccount:default:kubetest-unbound"; got != want {
			t.Fatalf("authenticated as %q, want %q", got, want)
		}
		// Authorization refuses what no role grants.
		for what, call := range map[string]func() error{
			"list pods": func() error {
				_, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
				return err
			},
			"get node": func() error {
				_, err := cs.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
				return err
			},
			"create configmap": func() error {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}
				_, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{})
				return err
			},
		} {
			if err := call(); !apierrors.IsForbidden(err) {
				t.Errorf("%s as an unbound ServiceAccount: err = %v, want Forbidden", what, err)
			}
		}
	})

	t.Run("admin creates a pod that stays pending and is gone after delete with grace 0", func(t *testing.T) {
		pods := s.Client.CoreV1().Pods("default")
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "kubetest-pod"},
			Spec: corev1.PodSpec{
				NodeName:   "node-a",
				Containers: []corev1.Container{{Name: "c", Image: "example.invalid/none"}},
			},
		}
		created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create pod as admin: %v", err)
		}
		if created.UID == "" {
			t.Fatal("created pod has no UID")
		}
		got, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Phase != corev1.PodPending && got.Status.Phase != "" {
			t.Fatalf("pod phase %q with no kubelet, want Pending or unset", got.Status.Phase)
		}
		zero := int64(0)
		if err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
		if _, err := pods.Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("pod after delete with grace period 0: err = %v, want NotFound", err)
		}
	})

	t.Run("admin kubeconfig works for kubectl", func(t *testing.T) {
		if _, err := exec.LookPath("kubectl"); err != nil {
			missing(t, err)
		}
		out, err := exec.CommandContext(ctx, "kubectl", "--kubeconfig", s.AdminKubeconfig, "auth", "can-i", "delete", "nodes").Output()
		if err != nil || strings.TrimSpace(string(out)) != "yes" {
			t.Fatalf("kubectl auth can-i delete nodes as admin: %q, %v", out, err)
		}
	})

	t.Run("Stop kills the API server and removes its directory, twice is fine", func(t *testing.T) {
		s2 := Start(t)
		pid := s2.proc.cmd.Process.Pid
		dir := s2.Dir
		s2.Stop()
		s2.Stop()
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("server dir %s after Stop: %v, want gone", dir, err)
		}
		if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); !os.IsNotExist(err) {
			t.Errorf("kube-apiserver pid %d still exists after Stop", pid)
		}
	})
}

// TestCachePathMatchesScript guards against the Go lookup and
// scripts/kube-apiserver.sh drifting apart: same default version (set in
// scripts/kube-build.sh, which the script runs), and,
// when the binary is cached, the very path the script prints (it returns
// at once then; it is never run when the binary is missing, which would
// start a long build).
func TestCachePathMatchesScript(t *testing.T) {
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "scripts", "kube-apiserver.sh")
	builder := filepath.Join(root, "scripts", "kube-build.sh")
	b, err := os.ReadFile(builder)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "KUBE_VERSION=${KUBE_VERSION:-"+KubeVersion+"}") {
		t.Fatalf("%s does not default to %s (kubetest.KubeVersion)", builder, KubeVersion)
	}
	p := cachedBinary()
	if executable(p) != nil {
		t.Skipf("no cached binary at %s; not running the script (it would build)", p)
	}
	cmd := exec.Command(script)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KUBE_VERSION=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", script, err)
	}
	if got := strings.TrimSpace(string(out)); got != p {
		t.Fatalf("script prints %q, kubetest looks at %q", got, p)
	}
}

// TestMissingBinary: a missing binary named in the environment is an
// error, not a silent fallback.
func TestMissingBinary(t *testing.T) {
	t.Setenv(EnvAPIServer, filepath.Join(t.TempDir(), "no-such-kube-apiserver"))
	if _, err := APIServerBinary(); err == nil {
		t.Fatal("APIServerBinary with a missing $IPKEEPER_KUBE_APISERVER: no error")
	}
	t.Setenv(EnvAPIServer, "")
	t.Setenv("IPKEEPER_CACHE", t.TempDir())
	if _, err := APIServerBinary(); err == nil || !strings.Contains(err.Error(), "make kube-apiserver") {
		t.Fatalf("APIServerBinary with an empty cache: %v, want ErrNoAPIServer saying make kube-apiserver", err)
	}
}
