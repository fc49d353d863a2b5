package node

import (
	"testing"
	"time"
)

// TestPodsRunOnIpkeeper creates 30 pods bound to the node on a
// dual-stack config: each reaches Running, each status.podIPs is exactly
// what ipkeeper holds for that pod's UID (one handle per pod, no address
// twice); deleting the pods through the kubelet releases every address,
// and ipkeeperctl check finds nothing.
func TestPodsRunOnIpkeeper(t *testing.T) {
	// The controller's grace is longer than the test: what releases the
	// addresses is the runtime's DEL, not a leak reclaim.
	n := startNode(t, nodeOptions{leakGrace: 10 * time.Minute, ranges: []any{
		[]any{map[string]any{"subnet": "10.81.0.0/24"}},
		[]any{map[string]any{"subnet": "fd81::/120"}},
	}})
	ns := n.newNamespace(t, nil)
	names := n.createPods(t, ns, "p", 30, nil)
	pods := n.waitRunning(t, ns, names)
	hs := n.handles(t)
	for name, p := range pods {
		if len(p.Status.PodIPs) != 2 {
			t.Errorf("pod %s: podIPs %v, want one IPv4 and one IPv6 address", name, p.Status.PodIPs)
		}
	}
	checkPodsMatchRecords(t, pods, hs)
	if len(hs) != len(names) {
		t.Errorf("ipkeeper holds %d handles for %d pods", len(hs), len(names))
	}
	if t.Failed() {
		return
	}

	n.deletePods(t, ns, names)
	n.waitGone(t, ns)
	n.waitFor(t, "ipkeeper holds no address once the pods are gone", podTimeout, func() (bool, string) {
		left := n.handles(t)
		return len(left) == 0, handleList(left)
	})
	n.checkClean(t)
}
