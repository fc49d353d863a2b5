package controller

import (
	"context"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// TestNodeGoneRuleNeedsANode: while the API lists no Node at all (more
// likely a broken view than a cluster without nodes), the node-gone rule
// never fires, however long it lasts: a pod bound to the deleted node
// keeps its allocation, so does an allocation without a pod on it, and
// the node's empty block keeps its claim. As soon as the API lists a
// Node again, all three go after the grace period.
func TestNodeGoneRuleNeedsANode(t *testing.T) {
	const grace = time.Minute
	r := newRig(t, grace)
	ctx := context.Background()
	f := passFamilies[0]
	r.alloc(func(a *allocator.Allocator) {
		for _, p := range []ipam.Pool{f.pool, f.tiny} {
			if _, err := a.EnsurePool(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
	})
	nodeA := r.node("a")
	uid := r.pod("web", nodeA, corev1.PodRunning)
	r.attach(f.pool, "web", "web", uid, nodeA, t0)
	r.attach(f.pool, "nopod", "", "", nodeA, t0)
	// An empty block of node-a: allocated and released.
	r.attach(f.tiny, "tmp", "", "", nodeA, t0)
	r.alloc(func(a *allocator.Allocator) {
		if _, err := a.Release(ctx, nodeA, "net.tmp.eth0"); err != nil {
			t.Fatal(err)
		}
	})
	r.deleteNode(nodeA)
	if ns, err := r.admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil || len(ns.Items) != 0 {
		t.Fatalf("setup: the API must list no Node: %d, %v", len(ns.Items), err)
	}
	r.waitCache(func() bool { return r.c.view.snapshot().NodeCount() == 0 }, "no Node in the cache")

	before := r.storeState()
	for i := range 4 {
		r.pass(t0.Add(time.Duration(i) * grace))
	}
	if after := r.storeState(); !maps.Equal(after, before) {
		t.Fatalf("passes while the API lists no Node changed the store:\n%v\n->\n%v", before, after)
	}

	// A Node again: the rule fires after the grace period.
	r.node("b")
	r.pass(t0.Add(4 * grace))
	r.pass(t0.Add(5 * grace))
	if hs := r.handles(); len(hs) != 0 {
		t.Fatalf("handles on the deleted node once a Node is listed again: %v, want none", hs)
	}
	r.alloc(func(a *allocator.Allocator) {
		cs, err := a.Store().ListClaims(ctx, store.ClaimSelector{Node: nodeA})
		if err != nil || len(cs) != 0 {
			t.Fatalf("claims of the deleted node once a Node is listed again: %+v, %v; want none", cs, err)
		}
	})
}
