package node

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// fourAddresses is a range with exactly four addresses to hand out:
// whoever holds them decides whether the next pod starts.
var fourAddresses = []any{[]any{map[string]any{"subnet": "10.84.0.0/29", "rangeStart": "10.84.0.2", "rangeEnd": "10.84.0.5"}}}

// TestNodeLostAndBack is the seed incident on a real node: pods hold
// every address of a small range when their kubelet stops; they are
// force-deleted and the Node is deleted, as when a node dies. The
// controller reclaims the addresses within its grace period plus 10 s of
// detection (plus scheduling slack on a busy machine), though the
// sandboxes still run. New pods created meanwhile get exactly those
// addresses once the kubelet is back, and the kubelet's teardown of its
// orphaned sandboxes (a DEL for each) releases nothing the new pods hold.
func TestNodeLostAndBack(t *testing.T) {
	const grace = 10 * time.Second
	n := startNode(t, nodeOptions{leakGrace: grace, ranges: fourAddresses})
	ns := n.newNamespace(t, nil)
	oldNames := n.createPods(t, ns, "old", 4, nil)
	oldPods := n.waitRunning(t, ns, oldNames)
	checkPodsMatchRecords(t, oldPods, n.handles(t))
	var oldAddrs []netip.Addr
	oldUIDs := map[string]bool{}
	for _, p := range oldPods {
		oldAddrs = append(oldAddrs, podAddrs(p)...)
		oldUIDs[string(p.UID)] = true
	}
	if t.Failed() {
		return
	}

	// The node dies: its kubelet stops (the sandboxes keep running),
	// its pods are force-deleted and the Node is deleted.
	n.kubelet.stop(30 * time.Second)
	ctx := context.Background()
	for _, name := range oldNames {
		if err := n.srv.Client.CoreV1().Pods(ns).Delete(ctx, name, deleteNow); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.srv.Client.CoreV1().Nodes().Delete(ctx, n.name, deleteNow); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	n.waitFor(t, "ipkeeper-controller reclaims the dead pods' addresses", grace+10*time.Second+reclaimSlack, func() (bool, string) {
		left := n.handles(t)
		return len(left) == 0, handleList(left)
	})
	t.Logf("reclaimed %d addresses %v after the deletes (grace %v)", len(oldAddrs), time.Since(start).Round(100*time.Millisecond), grace)
	if running := n.sandboxesOf(t, oldUIDs, "SANDBOX_READY"); len(running) != len(oldNames) {
		t.Fatalf("%d sandboxes of the deleted pods still run, want %d (the kubelet is stopped)", len(running), len(oldNames))
	}

	// New pods wait for the kubelet, which comes back, registers the
	// Node again and tears the orphaned sandboxes down.
	newNames := n.createPods(t, ns, "new", 4, nil)
	n.restartKubelet(t)
	newPods := n.waitRunning(t, ns, newNames)
	n.waitFor(t, "the kubelet stops the orphaned sandboxes", podTimeout, func() (bool, string) {
		ready := n.sandboxesOf(t, oldUIDs, "SANDBOX_READY")
		return len(ready) == 0, fmt.Sprintf("%d still ready", len(ready))
	})
	// The orphans' DELs have run; what the new pods hold is untouched.
	hs := n.handles(t)
	checkPodsMatchRecords(t, newPods, hs)
	if len(hs) != len(newNames) {
		t.Errorf("ipkeeper holds %d handles, want the %d new pods': %s", len(hs), len(newNames), handleList(hs))
	}
	var newAddrs []netip.Addr
	for _, p := range newPods {
		newAddrs = append(newAddrs, podAddrs(p)...)
	}
	slices.SortFunc(oldAddrs, func(a, b netip.Addr) int { return a.Compare(b) })
	slices.SortFunc(newAddrs, func(a, b netip.Addr) int { return a.Compare(b) })
	if !slices.Equal(oldAddrs, newAddrs) {
		t.Errorf("new pods hold %v, want the reclaimed %v (the range has four addresses)", newAddrs, oldAddrs)
	}
	if t.Failed() {
		return
	}
	n.deletePods(t, ns, newNames)
	n.waitGone(t, ns)
	n.waitFor(t, "ipkeeper holds no address once the pods are gone", podTimeout, func() (bool, string) {
		left := n.handles(t)
		return len(left) == 0, handleList(left)
	})
	n.checkClean(t)
}

// reclaimSlack is what a busy 2-core CI machine may add to the
// controller's detection (process scheduling, API latency).
const reclaimSlack = 20 * time.Second

// sandboxesOf lists the runtime's sandboxes of the given pod UIDs in the
// given state (SANDBOX_READY, SANDBOX_NOTREADY).
func (n *node) sandboxesOf(t *testing.T, uids map[string]bool, state string) []criSandbox {
	t.Helper()
	var out []criSandbox
	for _, sb := range n.sandboxes(t) {
		if uids[sb.Metadata.UID] && sb.State == state {
			out = append(out, sb)
		}
	}
	return out
}
