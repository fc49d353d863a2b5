package controller

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/consistency"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// TestPassOrphanClaims: a claim whose node's object does not hold its
// block — what an ADD killed by SIGKILL between its claim and its
// object's write leaves (test/storage's TestKill9) — is taken into the
// object of a node that exists, empty, once a grace period after it was
// first seen (a pass that sees it first writes nothing: an ADD may be
// between those writes); a gone node's orphan claim is deleted with its
// blocks. Afterwards the checker finds nothing and the live allocation is
// untouched. On every datastore type, IPv4 and IPv6.
func TestPassOrphanClaims(t *testing.T) {
	for _, backend := range backends {
		for _, f := range passFamilies {
			t.Run(backend+"/"+f.name, func(t *testing.T) {
				const grace = time.Minute
				r := newRigOn(t, grace, backend)
				ctx := context.Background()
				r.alloc(func(a *allocator.Allocator) {
					if _, err := a.EnsurePool(ctx, f.pool); err != nil {
						t.Fatal(err)
					}
				})
				nodeA, nodeG := r.node("a"), r.node("g")
				uid := r.pod("live", nodeA, corev1.PodRunning)
				live := r.attach(f.pool, "live", "live", uid, nodeA, t0)
				// The killed ADDs' claims: a block beyond the live one's
				// for node A, another for node G.
				orphanA := store.BlockRef{Pool: f.pool.Name, CIDR: f.pool.BlockAt(2)}
				orphanG := store.BlockRef{Pool: f.pool.Name, CIDR: f.pool.BlockAt(3)}
				r.alloc(func(a *allocator.Allocator) {
					for ref, node := range map[store.BlockRef]string{orphanA: nodeA, orphanG: nodeG} {
						if _, err := a.Store().CreateClaim(ctx, store.Claim{BlockRef: ref, Node: node}); err != nil {
							t.Fatal(err)
						}
					}
					rep, err := consistency.CheckStore(ctx, a.Store())
					if err != nil || len(rep.Problems) != 2 {
						t.Fatalf("test setup: check finds %+v (%v), want the two orphan claims", rep.Problems, err)
					}
				})
				r.deleteNode(nodeG)

				before := r.storeState()
				r.pass(t0)
				if after := r.storeState(); !maps.Equal(before, after) {
					t.Fatalf("the first observation wrote to the store:\nbefore %v\nafter  %v", before, after)
				}
				r.pass(t0.Add(grace - time.Nanosecond))
				if after := r.storeState(); !maps.Equal(before, after) {
					t.Fatalf("a pass before the grace period wrote to the store:\nbefore %v\nafter  %v", before, after)
				}
				r.pass(t0.Add(grace))
				if n := testutil.ToFloat64(r.m.claimsAdopted); n != 1 {
					t.Errorf("ipkeeper_claims_adopted_total = %v, want 1", n)
				}
				r.alloc(func(a *allocator.Allocator) {
					n, err := a.Store().GetNode(ctx, nodeA)
					if err != nil {
						t.Fatal(err)
					}
					b, held := n.Block(orphanA)
					if !held || b.InUse() != 0 || int(b.FreeCount(f.pool)) != int(f.pool.PermittedIn(orphanA.CIDR)) {
						t.Fatalf("node %s's object after the grace period: block %s held %v, %d in use, %d free; want it held and empty",
							nodeA, orphanA.CIDR, held, b.InUse(), b.FreeCount(f.pool))
					}
					if _, err := a.Store().GetClaim(ctx, orphanG); err == nil {
						t.Errorf("the orphan claim of deleted node %s is still there", nodeG)
					}
					rep, err := consistency.CheckStore(ctx, a.Store())
					if err != nil || len(rep.Problems) > 0 {
						t.Errorf("check after the pass: %v %+v", err, rep.Problems)
					}
				})
				if h, ok := r.handles()["live"]; !ok || h.IPs[0] != live.IPs[0] {
					t.Fatalf("the live allocation changed: %+v", h)
				}
			})
		}
	}
}
