package controller

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/consistency"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/leaks"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// family is one address family's pools for the pass tests.
type family struct {
	name       string
	pool, tiny ipam.Pool
}

var passFamilies = []family{
	{"IPv4",
		ipam.Pool{Name: "p4", CIDR: netipPrefix("10.60.0.0/24"), BlockSize: 28},
		ipam.Pool{Name: "t4", CIDR: netipPrefix("10.61.0.0/30"), BlockSize: 30}}, // two usable addresses
	{"IPv6",
		ipam.Pool{Name: "p6", CIDR: netipPrefix("fd60::/120"), BlockSize: 124},
		ipam.Pool{Name: "t6", CIDR: netipPrefix("fd61::/127"), BlockSize: 127}},
}

// TestPassRules runs the controller's passes on a fixed clock against
// the real API server and a real store of each type (local, etcd, and the
// kubernetes datastore's CRDs with the shipped RBAC): every rule of
// package leaks through informers, the two observations a grace period
// apart, a handle released and allocated again between them, the live
// allocations kept through every pass, and a deleted node's blocks.
func TestPassRules(t *testing.T) {
	for _, backend := range backends {
		for _, f := range passFamilies {
			t.Run(backend+"/"+f.name, func(t *testing.T) { testPassRules(t, backend, f) })
		}
	}
}

func testPassRules(t *testing.T, backend string, f family) {
	const grace = time.Minute
	r := newRigOn(t, grace, backend)
	ctx := context.Background()
	r.alloc(func(a *allocator.Allocator) {
		for _, p := range []ipam.Pool{f.pool, f.tiny} {
			if _, err := a.EnsurePool(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
	})
	nodeA, nodeB := r.node("a"), r.node("b")
	nodeZ := r.ns + "-z" // never a Node in the API
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }

	// Live pod.
	live := r.attach(f.pool, "live", "live", "", nodeA, at(1))
	liveUID := r.pod("live", nodeA, corev1.PodRunning, live.IPs[0].Addr)
	// The live handle recorded no UID above: give it one like the
	// plugin does (ADD after the pod exists).
	r.alloc(func(a *allocator.Allocator) {
		if _, err := a.Release(ctx, nodeA, live.ID); err != nil {
			t.Fatal(err)
		}
	})
	live = r.attach(f.pool, "live", "live", liveUID, nodeA, at(1))
	// Gone pod.
	goneUID := r.pod("gone", nodeA, corev1.PodRunning)
	r.attach(f.pool, "gone", "gone", goneUID, nodeA, at(2))
	r.deletePod("gone")
	// StatefulSet pod recreated under its name with a new UID.
	oldUID := r.pod("db-0", nodeA, corev1.PodRunning)
	r.attach(f.pool, "db-old", "db-0", oldUID, nodeA, at(3))
	r.deletePod("db-0")
	newUID := r.pod("db-0", nodeA, corev1.PodPending)
	dbNew := r.attach(f.pool, "db-new", "db-0", newUID, nodeA, at(4))
	// Finished pod.
	jobUID := r.pod("job", nodeA, corev1.PodRunning)
	r.attach(f.pool, "job", "job", jobUID, nodeA, at(5))
	// Sandbox recreated: two ADDs, no DEL, status shows the newer.
	sbUID := r.pod("sb", nodeA, corev1.PodRunning)
	r.attach(f.pool, "sb-old", "sb", sbUID, nodeA, at(6))
	sbNew := r.attach(f.pool, "sb-new", "sb", sbUID, nodeA, at(7))
	// A pod on node B, and attachments without a pod on B (a Node
	// the controller saw) and on Z (never a Node).
	onBUID := r.pod("on-b", nodeB, corev1.PodRunning)
	r.attach(f.pool, "on-b", "on-b", onBUID, nodeB, at(8))
	r.attach(f.pool, "bare-b", "", "", nodeB, at(9))
	bareZ := r.attach(f.pool, "bare-z", "", "", nodeZ, at(10))
	// A pod gone whose handle is released and allocated again
	// (same container, same address) between two observations.
	ghost := r.attach(f.tiny, "ghost", "ghost", "ghost-uid-1", nodeA, at(11))
	// Now the events that make leaks.
	jobPod, err := r.admin.CoreV1().Pods(r.ns).Get(ctx, "job", metav1GetOptions)
	if err != nil {
		t.Fatal(err)
	}
	r.setStatus(jobPod, corev1.PodSucceeded)
	sbPod, err := r.admin.CoreV1().Pods(r.ns).Get(ctx, "sb", metav1GetOptions)
	if err != nil {
		t.Fatal(err)
	}
	r.setStatus(sbPod, corev1.PodRunning, sbNew.IPs[0].Addr)
	r.waitCache(func() bool {
		j, _ := r.c.view.snapshot().Pod(r.ns, "job")
		s, _ := r.c.view.snapshot().Pod(r.ns, "sb")
		return j.Finished() && len(s.IPs) == 1
	}, "job finished and sb's address in the cache")
	r.deleteNode(nodeB)

	wantLeaked := []string{"bare-b", "db-old", "ghost", "gone", "job", "on-b", "sb-old"}
	wantKept := []string{"bare-z", "db-new", "live", "sb-new"}
	kept := func(when string) {
		t.Helper()
		hs := r.handles()
		for _, id := range wantKept {
			if _, ok := hs[id]; !ok {
				t.Fatalf("%s: live allocation %s was released", when, id)
			}
		}
		if hs["db-new"].IPs[0] != dbNew.IPs[0] || hs["live"].IPs[0] != live.IPs[0] || hs["sb-new"].IPs[0] != sbNew.IPs[0] || hs["bare-z"].IPs[0] != bareZ.IPs[0] {
			t.Fatalf("%s: a live allocation changed: %+v", when, hs)
		}
	}

	// First observation: candidates only, nothing written.
	before := r.storeState()
	r.pass(t0)
	if got := testutil.ToFloat64(r.m.leakCandidates); got != float64(len(wantLeaked)) {
		t.Errorf("leak candidates %v, want %d", got, len(wantLeaked))
	}
	if after := r.storeState(); !maps.Equal(before, after) {
		t.Fatalf("the first observation wrote to the store:\nbefore %v\nafter  %v", before, after)
	}
	kept("first pass")

	// The ghost's handle is released (a late DEL) and its container
	// is allocated again — the same ID and, the pool being tiny,
	// the same address — for another pod that is gone too.
	r.alloc(func(a *allocator.Allocator) {
		if _, err := a.Release(ctx, nodeA, ghost.ID); err != nil {
			t.Fatal(err)
		}
		// Take the other address so the ghost's comes back.
		if _, err := a.Allocate(ctx, allocator.Request{Handle: ipam.Handle{ID: "filler", Network: "net", ContainerID: "filler", IfName: "eth0", Node: nodeA},
			Sets: [][]string{{f.tiny.Name}}}); err != nil {
			t.Fatal(err)
		}
	})
	ghost2 := r.attach(f.tiny, "ghost", "ghost2", "ghost-uid-2", nodeA, at(12))
	if ghost2.IPs[0] != ghost.IPs[0] {
		t.Fatalf("test setup: the ghost's address %v did not come back (%v)", ghost.IPs[0], ghost2.IPs[0])
	}
	r.pass(t0.Add(grace / 2))

	// Just before the grace period: still nothing.
	before = r.storeState()
	r.pass(t0.Add(grace - time.Nanosecond))
	if after := r.storeState(); !maps.Equal(before, after) {
		t.Fatalf("a pass before the grace period wrote to the store")
	}
	kept("before the grace period")

	// Grace period over: the leaks seen since t0 go; the ghost's
	// second allocation, first seen at grace/2, stays.
	r.pass(t0.Add(grace))
	hs := r.handles()
	for _, id := range wantLeaked {
		if _, ok := hs[id]; ok && id != "ghost" {
			t.Errorf("leaked %s not released", id)
		}
	}
	if g, ok := hs["ghost"]; !ok || g.Pod != "ghost2" {
		t.Fatalf("the ghost's address, allocated again after the first observation, was released at the first one's grace period: %+v", g)
	}
	kept("after the grace period")
	wantReleases := map[leaks.Reason]float64{leaks.PodGone: 1, leaks.PodReplaced: 1, leaks.PodFinished: 1, leaks.NodeGone: 2, leaks.OldSandbox: 1}
	for reason, n := range wantReleases {
		if got := testutil.ToFloat64(r.m.releases.WithLabelValues(string(reason))); got != n {
			t.Errorf("releases{reason=%s} = %v, want %v", reason, got, n)
		}
	}
	// Node B's blocks are gone with their claims; node Z's
	// block (not a Node, but not empty) stays.
	r.alloc(func(a *allocator.Allocator) {
		nodes, err := a.AffineNodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if nodes[nodeB] != 0 || nodes[nodeA] == 0 || nodes[nodeZ] == 0 {
			t.Errorf("affinities after the grace period: %v", nodes)
		}
		bs, err := a.Blocks(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bs {
			if b.Node == nodeB {
				t.Errorf("block %s of deleted node %s kept", b.CIDR, nodeB)
			}
		}
		if n, err := a.Store().GetNode(ctx, nodeB); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the object of deleted node %s is left: %+v, %v", nodeB, n, err)
		}
		rep, err := consistency.CheckStore(ctx, a.Store())
		if err != nil || len(rep.Problems) > 0 {
			t.Errorf("check after the pass: %v %+v", err, rep.Problems)
		}
	})

	// Later passes: the second ghost goes after its own grace
	// period, the live ones stay through every pass.
	for i := 1; i <= 4; i++ {
		r.pass(t0.Add(grace + time.Duration(i)*grace/2))
		kept("a later pass")
	}
	if _, ok := r.handles()["ghost"]; ok {
		t.Error("the second ghost allocation was never released")
	}
	// Informers only: no GET of a single pod or node.
	for _, res := range []string{"pods", "nodes"} {
		if n := testutil.ToFloat64(r.m.kubeRequests.WithLabelValues("get", res)); n != 0 {
			t.Errorf("%v GETs of single %s", n, res)
		}
	}
}

// TestPassStaleView: after a watch failure within the grace period the
// controller releases nothing, and releases once the grace period passed
// without one.
func TestPassStaleView(t *testing.T) {
	f := passFamilies[0]
	const grace = time.Minute
	r := newRig(t, grace)
	r.alloc(func(a *allocator.Allocator) {
		if _, err := a.EnsurePool(context.Background(), f.pool); err != nil {
			t.Fatal(err)
		}
	})
	nodeA := r.node("a")
	uid := r.pod("gone", nodeA, corev1.PodRunning)
	r.attach(f.pool, "gone", "gone", uid, nodeA, t0)
	r.deletePod("gone")
	r.pass(t0)
	r.c.view.mu.Lock()
	r.c.view.lastWatchError = t0.Add(time.Second)
	r.c.view.mu.Unlock()
	r.pass(t0.Add(grace))
	if _, ok := r.handles()["gone"]; !ok {
		t.Fatal("released although a watch failed within the grace period")
	}
	r.pass(t0.Add(grace + 2*time.Second))
	if _, ok := r.handles()["gone"]; ok {
		t.Fatal("not released a grace period after the watch failure")
	}
}

func TestClassifyRequest(t *testing.T) {
	for _, c := range []struct{ method, url, verb, resource string }{
		{"GET", "/api/v1/pods?limit=500", "list", "pods"},
		{"GET", "/api/v1/pods?watch=true&resourceVersion=5", "watch", "pods"},
		{"GET", "/api/v1/namespaces/ns/pods/web", "get", "pods"},
		{"GET", "/api/v1/namespaces/ns/pods", "list", "pods"},
		{"GET", "/api/v1/nodes/n1", "get", "nodes"},
		{"GET", "/api/v1/namespaces", "list", "namespaces"},
		{"PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/ipkeeper-controller", "update", "leases"},
		{"POST", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases", "create", "leases"},
		{"GET", "/version", "get", "other"},
	} {
		req, _ := httpNewRequest(c.method, "https://x"+c.url)
		v, res := classifyRequest(req)
		if v != c.verb || res != c.resource {
			t.Errorf("%s %s: %s %s, want %s %s", c.method, c.url, v, res, c.verb, c.resource)
		}
	}
}
