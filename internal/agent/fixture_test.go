package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/podinfo"
)

// fixed is what fixture made: a namespace, its two nodes, the pods on
// them by name, and the node ServiceAccount's kubeconfig.
type fixed struct {
	ns, nodeA, nodeB, kubeconfig string
	pods                         map[string]*corev1.Pod
}

// fixtures counts the fixtures made of each name in this process, so that
// a test run again (go test -count) gets fresh names: a namespace cannot
// be made again on an API server without a namespace controller.
var fixtures = map[string]int{}

// fixture creates, on the shared API server, namespace ns (annotated; a
// suffix when the name was used before in this process), node-<ns>-a
// (dual-stack pod CIDRs, labels), node-<ns>-b (IPv6 only) and a pod on
// each.
func fixture(t *testing.T, name string) fixed {
	t.Helper()
	fixtures[name]++
	ns := name
	if n := fixtures[name]; n > 1 {
		ns = fmt.Sprintf("%s-%d", name, n)
	}
	s := kubetest.Require(t, srv)
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	ctx := ctxT(t)
	cs := s.Client
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"team": "a"}, Annotations: map[string]string{podinfo.AnnotationPools: `["ns-pool"]`}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "node-" + ns + "-a", Labels: map[string]string{"zone": "z1"}},
			Spec: corev1.NodeSpec{PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"10.244.1.0/24", "fd00:244:1::/64"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "node-" + ns + "-b", Labels: map[string]string{"zone": "z2"}},
			Spec: corev1.NodeSpec{PodCIDR: "fd00:244:2::/64", PodCIDRs: []string{"fd00:244:2::/64"}}},
	} {
		if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pods := map[string]*corev1.Pod{}
	for pod, p := range map[string]struct {
		node string
		ann  map[string]string
	}{
		"web-4": {"node-" + ns + "-a", map[string]string{podinfo.AnnotationIPAddrs: `["10.244.1.9"]`}},
		"web-6": {"node-" + ns + "-a", map[string]string{podinfo.CalicoIPv6Pools: `["fd00:244:1::/64"]`}},
		"far-6": {"node-" + ns + "-b", map[string]string{podinfo.AnnotationIPAddrs: `["fd00:244:2::9"]`}},
	} {
		pods[pod] = createPod(t, cs, ns, pod, p.node, p.ann)
	}
	return fixed{ns: ns, nodeA: "node-" + ns + "-a", nodeB: "node-" + ns + "-b",
		kubeconfig: s.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-node"), pods: pods}
}

// createPod creates pod ns/name on node with annotations ann.
func createPod(t *testing.T, cs kubernetes.Interface, ns, name, node string, ann map[string]string) *corev1.Pod {
	t.Helper()
	p, err := cs.CoreV1().Pods(ns).Create(ctxT(t), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}, Annotations: ann},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ctxT is a context that ends with the test, or after two minutes.
func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
