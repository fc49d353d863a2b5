package node

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// deleteNow deletes with grace period 0.
var deleteNow = metav1.DeleteOptions{GracePeriodSeconds: new(int64)}

// podTimeout bounds the waits for pods to start or go: generous, for a
// 2-core CI machine shared with other test binaries.
const podTimeout = 5 * time.Minute

// newNamespace creates a namespace for the test (with annotations) and
// deletes it at the end.
func (n *node) newNamespace(t *testing.T, annotations map[string]string) string {
	t.Helper()
	name := "ipkn-" + randSuffix()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}
	if _, err := n.srv.Client.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// No namespace controller runs: the pods go first, at once.
		ctx := context.Background()
		_ = n.srv.Client.CoreV1().Pods(name).DeleteCollection(ctx, deleteNow, metav1.ListOptions{})
		_ = n.srv.Client.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	})
	return name
}

// podSpec is a pod bound to the node (no scheduler) running the pause
// image, which is never pulled.
func (n *node) podSpec(namespace, name string, annotations map[string]string) *corev1.Pod {
	no := false
	grace := int64(2)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Annotations: annotations},
		Spec: corev1.PodSpec{
			NodeName:                      n.name,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			DNSPolicy:                     corev1.DNSDefault,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "pause", Image: pauseImage, ImagePullPolicy: corev1.PullNever,
			}},
		},
	}
}

// createPods creates count pods name-0 ... name-(count-1).
func (n *node) createPods(t *testing.T, namespace, prefix string, count int, annotations map[string]string) []string {
	t.Helper()
	var names []string
	for i := range count {
		name := fmt.Sprintf("%s-%d", prefix, i)
		if _, err := n.srv.Client.CoreV1().Pods(namespace).Create(context.Background(), n.podSpec(namespace, name, annotations), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	return names
}

// pods lists the namespace's pods by name.
func (n *node) pods(t *testing.T, namespace string) map[string]corev1.Pod {
	t.Helper()
	list, err := n.srv.Client.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]corev1.Pod{}
	for _, p := range list.Items {
		out[p.Name] = p
	}
	return out
}

// waitRunning waits until every named pod is Running with its podIPs
// reported, and returns them.
func (n *node) waitRunning(t *testing.T, namespace string, names []string) map[string]corev1.Pod {
	t.Helper()
	var got map[string]corev1.Pod
	n.waitFor(t, fmt.Sprintf("%d pods of %s are Running with an address", len(names), namespace), podTimeout, func() (bool, string) {
		got = n.pods(t, namespace)
		var notYet []string
		for _, name := range names {
			p, ok := got[name]
			if !ok || p.Status.Phase != corev1.PodRunning || len(p.Status.PodIPs) == 0 {
				notYet = append(notYet, name+"="+podState(p))
			}
		}
		sort.Strings(notYet)
		if len(notYet) > 5 {
			notYet = append(notYet[:5], fmt.Sprintf("... %d more", len(notYet)-5))
		}
		return len(notYet) == 0, strings.Join(notYet, ", ")
	})
	return got
}

// podState is the pod's phase and waiting reasons, for messages.
func podState(p corev1.Pod) string {
	s := string(p.Status.Phase)
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Waiting != nil {
			s += "/" + c.State.Waiting.Reason
		}
	}
	return s
}

// waitGone waits until the namespace has no pods left.
func (n *node) waitGone(t *testing.T, namespace string) {
	t.Helper()
	n.waitFor(t, "every pod of "+namespace+" is gone", podTimeout, func() (bool, string) {
		left := n.pods(t, namespace)
		return len(left) == 0, fmt.Sprintf("%d left", len(left))
	})
}

// deletePods deletes the named pods with their default grace (the
// kubelet stops them and the runtime calls CNI DEL).
func (n *node) deletePods(t *testing.T, namespace string, names []string) {
	t.Helper()
	for _, name := range names {
		if err := n.srv.Client.CoreV1().Pods(namespace).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
}

// podAddrs are the pod's addresses as the API server has them.
func podAddrs(p corev1.Pod) []netip.Addr {
	var out []netip.Addr
	for _, ip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

// handleAddrs are a handle's addresses, sorted.
func handleAddrs(h ipam.Handle) []netip.Addr {
	var out []netip.Addr
	for _, ip := range h.IPs {
		out = append(out, ip.Addr)
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

// byPodUID groups handles by the pod UID they were made for.
func byPodUID(hs []ipam.Handle) map[string][]ipam.Handle {
	out := map[string][]ipam.Handle{}
	for _, h := range hs {
		out[h.PodUID] = append(out[h.PodUID], h)
	}
	return out
}

// checkPodsMatchRecords fails t unless each pod's status.podIPs are
// exactly the addresses of the one handle ipkeeper holds for its UID.
func checkPodsMatchRecords(t *testing.T, pods map[string]corev1.Pod, hs []ipam.Handle) {
	t.Helper()
	recs := byPodUID(hs)
	seen := map[netip.Addr]string{}
	for name, p := range pods {
		got := podAddrs(p)
		h := recs[string(p.UID)]
		if len(h) != 1 {
			t.Errorf("pod %s (uid %s, podIPs %v): ipkeeper holds %d handles for its UID, want 1: %v", name, p.UID, got, len(h), h)
			continue
		}
		if want := handleAddrs(h[0]); !slices.Equal(got, want) {
			t.Errorf("pod %s: status.podIPs %v, ipkeeper's record for its UID holds %v", name, got, want)
		}
		for _, a := range got {
			if other, dup := seen[a]; dup {
				t.Errorf("pods %s and %s both report %s", other, name, a)
			}
			seen[a] = name
		}
	}
}

// handleList describes handles for messages.
func handleList(hs []ipam.Handle) string {
	var parts []string
	for _, h := range hs {
		parts = append(parts, fmt.Sprintf("%s/%s(uid %s) %v", h.Namespace, h.Pod, h.PodUID, handleAddrs(h)))
	}
	return strings.Join(parts, "; ")
}
