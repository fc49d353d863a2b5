package controller

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/nodealloc"
	"github.com/ipkeeper/ipkeeper/internal/plugin"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// TestLoanGraceExceedsADD: a loan is dropped no sooner than any ADD,
// whose loan comes before its record, can run.
func TestLoanGraceExceedsADD(t *testing.T) {
	if addBound <= plugin.MaxTimeout {
		t.Fatalf("addBound %v does not exceed the plugin's longest timeout %v", addBound, plugin.MaxTimeout)
	}
	c := &Controller{cfg: Config{LeakGrace: time.Minute}}
	if g := c.loanGrace(); g < addBound {
		t.Fatalf("loan grace %v with a leak grace of a minute, want at least %v", g, addBound)
	}
}

// addLoan writes into node's object a loan of handle id from lender.
func addLoan(t *testing.T, r *rig, node, id, lender string) {
	t.Helper()
	r.alloc(func(a *allocator.Allocator) {
		ctx := context.Background()
		n, err := a.Store().GetNode(ctx, node)
		if err != nil {
			t.Fatal(err)
		}
		n = nodealloc.Clone(n)
		n.Loans = append(n.Loans, store.Loan{Handle: id, Lender: lender})
		if _, err := a.Store().UpdateNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	})
}

// loansOf returns the handles of node's loans.
func loansOf(t *testing.T, r *rig, node string) []string {
	t.Helper()
	var out []string
	r.alloc(func(a *allocator.Allocator) {
		n, err := a.Store().GetNode(context.Background(), node)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range n.Loans {
			out = append(out, l.Handle)
		}
	})
	slices.Sort(out)
	return out
}

// TestPassLoans: a loan whose lender holds no record of its handle is
// dropped from the borrower's object by a pass a loan grace period after
// the one that first saw it, and not before; a loan first seen later (an
// ADD between its loan and its record) is kept, and so is one whose
// record appeared before the second observation. Local, etcd and
// Kubernetes datastores, IPv4 and IPv6.
func TestPassLoans(t *testing.T) {
	for _, backend := range []string{config.DatastoreLocal, config.DatastoreEtcd, config.DatastoreKubernetes} {
		for _, f := range passFamilies {
			t.Run(backend+"/"+f.name, func(t *testing.T) {
				r := newRigOn(t, time.Minute, backend)
				grace := r.c.loanGrace()
				ctx := context.Background()
				r.alloc(func(a *allocator.Allocator) {
					for _, p := range []ipam.Pool{f.pool, f.tiny} {
						if _, err := a.EnsurePool(ctx, p); err != nil {
							t.Fatal(err)
						}
					}
				})
				nodeA, nodeB := r.node("a"), r.node("b")
				r.attach(f.pool, "a-live", "a-live", r.pod("a-live", nodeA, corev1.PodRunning), nodeA, t0)
				// Node B holds the tiny pool's only block, one address free.
				r.attach(f.tiny, "b-live", "b-live", r.pod("b-live", nodeB, corev1.PodRunning), nodeB, t0)
				stale := ipam.HandleID("net", "moved", "eth0")
				borrowed := ipam.HandleID("net", "borrowed", "eth0")
				addLoan(t, r, nodeA, stale, nodeB)
				addLoan(t, r, nodeA, borrowed, nodeB) // an ADD after its loan

				before := r.storeState()
				r.pass(t0)
				if after := r.storeState(); !maps.Equal(before, after) {
					t.Fatalf("the first observation wrote to the store:\nbefore %v\nafter  %v", before, after)
				}
				// The ADD writes its record; another starts.
				h := r.attach(f.tiny, "borrowed", "borrowed", r.pod("borrowed", nodeA, corev1.PodRunning), nodeA, t0)
				if len(h.IPs) != 1 || !f.tiny.CIDR.Contains(h.IPs[0].Addr) {
					t.Fatalf("test setup: the borrowed allocation is %+v", h)
				}
				inflight := ipam.HandleID("net", "inflight", "eth0")
				addLoan(t, r, nodeA, inflight, nodeB)

				r.pass(t0.Add(grace - time.Nanosecond))
				want := []string{borrowed, inflight, stale}
				slices.Sort(want)
				if got := loansOf(t, r, nodeA); !slices.Equal(got, want) {
					t.Fatalf("loans before the grace period: %v, want %v", got, want)
				}
				r.pass(t0.Add(grace))
				want = []string{borrowed, inflight}
				slices.Sort(want)
				if got := loansOf(t, r, nodeA); !slices.Equal(got, want) {
					t.Fatalf("loans after the grace period: %v, want %v (the stale one dropped)", got, want)
				}
				if hs := r.handles(); hs["borrowed"].IPs[0] != h.IPs[0] || hs["a-live"].Node != nodeA || hs["b-live"].Node != nodeB {
					t.Fatalf("allocations changed: %+v", hs)
				}
			})
		}
	}
}

// TestPassLoansViewNotSynced: a loan without a record is not dropped on
// a view of the datastore that is not synced: neither by a pass that
// starts then nor by one whose view failed after it read it; it is once
// the view resumed. etcd and Kubernetes, IPv4 and IPv6.
func TestPassLoansViewNotSynced(t *testing.T) {
	forViews(t, func(t *testing.T, ds string, f family) {
		r := newViewRig(t, time.Minute, f, ds)
		grace := r.c.loanGrace()
		nodeA, nodeB := r.node("a"), r.node("b")
		r.attach(f.pool, "a-live", "a-live", r.pod("a-live", nodeA, corev1.PodRunning), nodeA, t0)
		stale := ipam.HandleID("net", "moved", "eth0")
		addLoan(t, r.rig, nodeA, stale, nodeB)
		if err := r.pass(t0); err != nil {
			t.Fatal(err)
		}
		before := r.storeState()
		r.passesOnFailedView(t0.Add(grace), t0.Add(2*grace), before)
		if err := r.pass(t0.Add(3 * grace)); err != nil {
			t.Fatal(err)
		}
		if got := loansOf(t, r.rig, nodeA); len(got) != 0 {
			t.Errorf("loans once the view resumed: %v, want none", got)
		}
	})
}
