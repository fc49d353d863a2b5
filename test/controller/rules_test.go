package controller

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// dualStack is a network with an IPv4 and an IPv6 range set, so that every
// rule is exercised with both families side by side.
func dualStack(t *testing.T, name string, v4, v6 string, extra map[string]any) *network {
	ipam := map[string]any{"ranges": []any{
		[]any{map[string]any{"subnet": v4}},
		[]any{map[string]any{"subnet": v6}},
	}}
	for k, v := range extra {
		ipam[k] = v
	}
	return newNetwork(t, name, ipam)
}

func addrsOf(h ipam.Handle) []netip.Addr {
	var out []netip.Addr
	for _, ip := range h.IPs {
		out = append(out, ip.Addr)
	}
	return out
}

// waitPasses waits until the controller has run n more passes.
func (p *proc) waitPasses(n int) {
	p.t.Helper()
	now := p.metric("ipkeeper_reconcile_duration_seconds_count")
	p.waitMetric(2*time.Minute, "ipkeeper_reconcile_duration_seconds_count", func(v float64) bool { return v >= now+float64(n) })
}

var singleFlags = []string{"--leader-elect=false", "--leak-grace=2s", "--resync=1s"}

// TestStatefulSetRecreated: a StatefulSet pod deleted and created again
// under its name with a new UID (no DEL for the old sandbox) keeps its new
// addresses through every pass; the old ones are reclaimed.
func TestStatefulSetRecreated(t *testing.T) {
	s := setup(t)
	c := newCluster(t, s)
	net := dualStack(t, "sts", "10.71.0.0/24", "fd71::/120", nil)
	node := c.node("a")
	oldUID := c.pod("db-0", node)
	net.mustAdd(node, c.ns, "db-0", oldUID, "old-sandbox")
	p := startController(t, "controller", net.env(), singleFlags...)
	p.waitPasses(1)

	c.deletePod("db-0")
	newUID := c.pod("db-0", node)
	net.mustAdd(node, c.ns, "db-0", newUID, "new-sandbox")
	newer := net.handles()["new-sandbox"]
	c.status("db-0", "Running", addrsOf(newer)...)

	p.waitMetric(time.Minute, `ipkeeper_releases_total{reason="pod-replaced"}`, func(v float64) bool { return v == 1 })
	// Every later pass keeps the new pod's addresses.
	for range 4 {
		p.waitPasses(1)
		hs := net.handles()
		if _, ok := hs["old-sandbox"]; ok {
			t.Fatal("the old pod's allocation was not released")
		}
		if h, ok := hs["new-sandbox"]; !ok || !slices.Equal(addrsOf(h), addrsOf(newer)) || h.PodUID != newUID {
			t.Fatalf("the recreated pod lost its addresses %v: %+v", addrsOf(newer), hs)
		}
	}
	if n := p.metric(`ipkeeper_releases_total{reason="pod-replaced"}`); n != 1 {
		t.Errorf("%v pod-replaced releases, want 1", n)
	}
	if n := p.metric(`ipkeeper_kube_requests_total{resource="pods",verb="get"}`); n != 0 {
		t.Errorf("the controller made %v GETs of single pods", n)
	}
	if out, errs, code := net.ctl("check", "--kubeconfig", s.AdminKubeconfig); code != 0 {
		t.Fatalf("check: exit %d\n%s%s", code, out, errs)
	}
}

// TestSandboxRecreated: a pod's sandbox is recreated (node reboot, runtime
// restart): two ADDs with different container IDs, same pod UID, no DEL
// for the first. The first sandbox's addresses are reclaimed, never the
// current one's. A pod whose status still reports its first sandbox's
// addresses keeps both.
func TestSandboxRecreated(t *testing.T) {
	s := setup(t)
	c := newCluster(t, s)
	net := dualStack(t, "sandbox", "10.72.0.0/24", "fd72::/120", nil)
	node := c.node("a")
	uid := c.pod("web", node)
	net.mustAdd(node, c.ns, "web", uid, "web-first")
	first := net.handles()["web-first"]
	c.status("web", "Running", addrsOf(first)...)
	net.mustAdd(node, c.ns, "web", uid, "web-second") // runtime restarted: a new sandbox, no DEL
	second := net.handles()["web-second"]
	c.status("web", "Running", addrsOf(second)...)

	// The kubelet has not reported the new sandbox's addresses yet.
	stuckUID := c.pod("stuck", node)
	net.mustAdd(node, c.ns, "stuck", stuckUID, "stuck-first")
	stuckFirst := net.handles()["stuck-first"]
	c.status("stuck", "Running", addrsOf(stuckFirst)...)
	net.mustAdd(node, c.ns, "stuck", stuckUID, "stuck-second")

	p := startController(t, "controller", net.env(), singleFlags...)
	p.waitMetric(time.Minute, `ipkeeper_releases_total{reason="old-sandbox"}`, func(v float64) bool { return v == 1 })
	for range 3 {
		p.waitPasses(1)
		hs := net.handles()
		if _, ok := hs["web-first"]; ok {
			t.Fatal("the first sandbox's allocation was not released")
		}
		if h, ok := hs["web-second"]; !ok || !slices.Equal(addrsOf(h), addrsOf(second)) {
			t.Fatalf("the current sandbox lost its addresses: %+v", hs)
		}
		if _, ok := hs["stuck-first"]; !ok {
			t.Fatal("released the first sandbox of a pod whose status still reports it")
		}
		if _, ok := hs["stuck-second"]; !ok {
			t.Fatal("released the newest sandbox of a pod")
		}
	}
	if p.logCount("released leaked address", `"reason":"old-sandbox"`, `"pod":"`+c.ns+`/web"`, `"uid":"`+uid+`"`) != 1 {
		t.Error("no release log line naming the pod, its UID and the reason")
	}
}

// TestNodeDeleted: deleting a Node (its pods stay in the API, bound to it,
// as when nothing garbage-collects them) releases the node's allocations
// after the grace period, frees its blocks with their claims, and leaves
// the other nodes' alone.
func TestNodeDeleted(t *testing.T) {
	s := setup(t)
	c := newCluster(t, s)
	net := dualStack(t, "nodes", "10.73.0.0/24", "fd73::/120", map[string]any{"blockSize": 30, "ipv6BlockSize": 126})
	nodeA, nodeC := c.node("a"), c.node("c")
	liveUID := c.pod("live", nodeA)
	net.mustAdd(nodeA, c.ns, "live", liveUID, "live")
	for _, name := range []string{"c-1", "c-2", "c-3", "c-4", "c-5", "c-6", "c-7"} {
		uid := c.pod(name, nodeC)
		net.mustAdd(nodeC, c.ns, name, uid, name)
	}
	affinities := func() map[string]int {
		var out map[string]int
		net.withAllocator(func(a *allocator.Allocator) {
			var err error
			if out, err = a.AffineNodes(ctxT(t)); err != nil {
				t.Fatal(err)
			}
		})
		return out
	}
	before := affinities()
	if before[nodeC] < 4 || before[nodeA] != 2 {
		t.Fatalf("test setup: claims per node %v (want node c in at least two blocks per family)", before)
	}
	p := startController(t, "controller", net.env(), singleFlags...)
	p.waitPasses(1)
	c.deleteNode(nodeC)
	p.waitMetric(time.Minute, `ipkeeper_releases_total{reason="node-gone"}`, func(v float64) bool { return v == 7 })
	p.waitMetric(time.Minute, "ipkeeper_node_blocks_freed_total", func(v float64) bool { return v == float64(before[nodeC]) })
	after := affinities()
	if after[nodeC] != 0 || after[nodeA] != before[nodeA] {
		t.Fatalf("claims per node after node %s was deleted: %v (before %v)", nodeC, after, before)
	}
	net.withAllocator(func(a *allocator.Allocator) {
		bs, err := a.Blocks(ctxT(t), "")
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bs {
			if b.Node == nodeC {
				t.Errorf("block %s of the deleted node is still there", b.CIDR)
			}
		}
	})
	hs := net.handles()
	if len(hs) != 1 || hs["live"].PodUID != liveUID {
		t.Fatalf("handles after the node's deletion: %+v", hs)
	}
	if out, errs, code := net.ctl("check", "--kubeconfig", s.AdminKubeconfig); code != 0 {
		t.Fatalf("check: exit %d\n%s%s", code, out, errs)
	}
}
