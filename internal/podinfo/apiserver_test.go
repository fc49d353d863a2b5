package podinfo

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/kubetest"
)

// TestLookupAgainstAPIServer reads a pod, its namespace and its node from
// a real kube-apiserver with the plugin's own ServiceAccount
// (kube-system/ipkeeper-node, RBAC from deploy/), and checks the errors a
// missing pod or node, an account without a role and an unreachable
// server give.
func TestLookupAgainstAPIServer(t *testing.T) {
	srv := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := srv.Client
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns-a",
		Annotations: map[string]string{AnnotationPools: `["ns-pool"]`}}}, metav1.CreateOptions{}))
	must(cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{"zone": "z1"}},
		Spec: corev1.NodeSpec{PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"10.244.1.0/24", "fd00:244:1::/64"}}}, metav1.CreateOptions{}))
	pod, err := cs.CoreV1().Pods("ns-a").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Annotations: map[string]string{AnnotationIPAddrs: `["10.244.1.9"]`}},
		Spec:       corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	c, err := NewFromKubeconfig(srv.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-node"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	info, err := c.Lookup(ctx, "ns-a", "web-0", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if info.Pod.UID != string(pod.UID) || info.Pod.Annotations[AnnotationIPAddrs] != `["10.244.1.9"]` {
		t.Errorf("pod %+v, want UID %s and its annotation", info.Pod, pod.UID)
	}
	if info.Namespace.Annotations[AnnotationPools] != `["ns-pool"]` {
		t.Errorf("namespace %+v", info.Namespace)
	}
	if info.Node.Labels["zone"] != "z1" || len(info.Node.PodCIDRs) != 2 {
		t.Errorf("node %+v", info.Node)
	}
	if p, ok := info.Node.PodCIDR(4); !ok || p != netip.MustParsePrefix("10.244.1.0/24") {
		t.Errorf("IPv4 pod CIDR %v", p)
	}
	if p, ok := info.Node.PodCIDR(6); !ok || p != netip.MustParsePrefix("fd00:244:1::/64") {
		t.Errorf("IPv6 pod CIDR %v", p)
	}
	sel, err := info.Selection()
	if err != nil || sel.IPs[0] != netip.MustParseAddr("10.244.1.9") || sel.Pools[0] != "ns-pool" {
		t.Errorf("selection %+v, %v", sel, err)
	}
	// Without a pod: the node only.
	if info, err := c.Lookup(ctx, "", "", "node-a"); err != nil || info.Pod != nil || info.Node == nil {
		t.Errorf("node-only lookup: %+v, %v", info, err)
	}

	for _, tc := range []struct {
		name          string
		ns, pod, node string
		want          error
		mention       string
	}{
		{"pod gone", "ns-a", "web-1", "node-a", ErrPodNotFound, "pod ns-a/web-1"},
		{"node unknown", "ns-a", "web-0", "node-x", ErrNodeNotFound, "node node-x"},
	} {
		if _, err := c.Lookup(ctx, tc.ns, tc.pod, tc.node); !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("%s: %v, want %v naming %s", tc.name, err, tc.want, tc.mention)
		}
	}

	// An account RBAC grants nothing is denied.
	other, err := NewFromKubeconfig(srv.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-nobody"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Lookup(ctx, "ns-a", "web-0", "node-a"); !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), "403") {
		t.Errorf("an account without a role: %v, want ErrDenied (403)", err)
	}

	// A server that is not there is unavailable (try again later).
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	creds, err := LoadKubeconfig(srv.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-node"))
	if err != nil {
		t.Fatal(err)
	}
	creds.Server.Host = addr
	gone := New(creds)
	defer gone.Close()
	if _, err := gone.Lookup(ctx, "ns-a", "web-0", "node-a"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("a closed port: %v, want ErrUnavailable", err)
	}
}

// BenchmarkLookup is one pod-aware call's API work in process: a fresh
// client (kubeconfig read, TLS handshake) and a Lookup of pod, namespace
// and node; sub-benchmarks compare the concurrent Lookup with the three
// GETs one after another. Run with
// go test -run x -bench Lookup ./internal/podinfo.
func BenchmarkLookup(b *testing.B) {
	srv := kubetest.Start(b)
	ctx := context.Background()
	cs := srv.Client
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "c", Image: "x"}}}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	kc := srv.ServiceAccountKubeconfig(b, "kube-system", "ipkeeper-node")
	for _, mode := range []string{"concurrent", "sequential"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				c, err := NewFromKubeconfig(kc)
				if err != nil {
					b.Fatal(err)
				}
				if mode == "concurrent" {
					_, err = c.Lookup(ctx, "default", "p", "node-a")
				} else {
					if _, err = c.Pod(ctx, "default", "p"); err == nil {
						if _, err = c.Namespace(ctx, "default"); err == nil {
							_, err = c.Node(ctx, "node-a")
						}
					}
				}
				c.Close()
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
