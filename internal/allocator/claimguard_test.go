package allocator_test

import (
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/allocator/allocatortest"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/nodealloc"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// victimSetup: node-b claims the pool's first block and holds two
// addresses in it; node-a claims the next block and holds one. It returns
// node-b's block.
func victimSetup(t *testing.T, a *allocator.Allocator, p ipam.Pool) store.BlockRef {
	t.Helper()
	for _, c := range []struct{ node, container string }{{"node-b", "b0"}, {"node-b", "b1"}, {"node-a", "a0"}} {
		if _, err := a.Allocate(t.Context(), podRequest(c.node, c.container, p.Name)); err != nil {
			t.Fatal(err)
		}
	}
	first, _ := p.BlockSpan()
	return store.BlockRef{Pool: p.Name, CIDR: p.BlockAt(first)}
}

// wantRefused fails the test unless err is the claim guard's refusal
// naming block ref and, when claimant is set, the node its claim names.
func wantRefused(t *testing.T, what string, err error, ref store.BlockRef, claimant string) {
	t.Helper()
	if !errors.Is(err, allocator.ErrBlockNotClaimed) || !strings.Contains(err.Error(), ref.String()) ||
		claimant != "" && !strings.Contains(err.Error(), `"`+claimant+`"`) {
		t.Fatalf("%s: %v; want %v naming block %s and node %q", what, err, allocator.ErrBlockNotClaimed, ref, claimant)
	}
}

// unchanged fails the test unless node's stored object is still want (in
// the order the store keeps blocks and records).
func unchanged(t *testing.T, s store.Store, want store.Node) {
	t.Helper()
	got, err := s.GetNode(t.Context(), want.Name)
	if err != nil {
		t.Fatal(err)
	}
	g, w := got.Normalized(), want.Normalized()
	if got.Version != want.Version || !reflect.DeepEqual(g.Handles, w.Handles) || !reflect.DeepEqual(g.Blocks, w.Blocks) {
		t.Fatalf("node object %s changed: %+v; want %+v", want.Name, got, want)
	}
}

// TestForgedBlockRefused: node-a's object rewritten through the store (as
// node-a's credentials can) with node-b's block in it, node-b's held
// address first in its free queue, never makes an ADD on node-a hand out
// that address: a fresh allocator (a plugin process) and the long-lived
// one that allocated before (an agent) both fail naming the block and
// its claimant, and nothing is written. The warm ADD before the forgery
// read nothing.
func TestForgedBlockRefused(t *testing.T) {
	for _, p := range []ipam.Pool{v4Pool, v6Pool} {
		t.Run(p.Name, func(t *testing.T) {
			storeBackends(t, func(t *testing.T, s store.Store) {
				cs := &counted{Store: s}
				warm := newAllocator(t, cs, p)
				ref := victimSetup(t, warm, p)
				r0 := cs.reads.Load()
				if _, err := warm.Allocate(t.Context(), podRequest("node-a", "a1", p.Name)); err != nil {
					t.Fatal(err)
				}
				if r := cs.reads.Load() - r0; r != 0 {
					t.Fatalf("a warm ADD made %d reads, want none", r)
				}
				victim, err := s.GetNode(t.Context(), "node-b")
				if err != nil {
					t.Fatal(err)
				}
				forged, stolen := allocatortest.Steal(t, s, "node-a", "node-b", ref)
				for name, al := range map[string]*allocator.Allocator{"fresh": allocator.New(s, nil), "warm": warm} {
					h, err := al.Allocate(t.Context(), podRequest("node-a", "a2-"+name, p.Name))
					if err == nil {
						t.Fatalf("%s allocator: ADD on node-a = %v (node-b's %s is the stolen address)", name, h.IPs, stolen)
					}
					wantRefused(t, name+" allocator", err, ref, "node-b")
				}
				unchanged(t, s, victim)
				unchanged(t, s, forged)
			})
		})
	}
}

// TestForgedRecordRefused: an ADD repeated for an attachment whose record
// a forged object points into another node's block, and a takeover of
// such a record, are refused like a new address from it.
func TestForgedRecordRefused(t *testing.T) {
	storeBackends(t, func(t *testing.T, s store.Store) {
		ctx := t.Context()
		a := newAllocator(t, s, v4Pool)
		ref := victimSetup(t, a, v4Pool)
		vb := allocatortest.VictimBlock(t, s, "node-b", ref)
		own, err := s.GetNode(ctx, "node-a")
		if err != nil {
			t.Fatal(err)
		}
		// a0's ADD repeated: its record now names node-b's address.
		a0 := podRequest("node-a", "a0", v4Pool.Name)
		moved, _ := nodealloc.Release(own, a0.Handle.ID)
		forged, _ := allocatortest.WithStolenRecord(t, moved, vb, v4Pool, a0.Handle)
		allocatortest.Write(t, s, forged)
		_, err = allocator.New(s, nil).Allocate(ctx, a0)
		wantRefused(t, "repeated ADD", err, ref, "node-b")

		// An earlier sandbox of pod P whose record is in node-b's block.
		old := podRequest("node-a", "old", v4Pool.Name)
		old.Handle.NetNS = "/var/run/netns/old"
		forged, _ = allocatortest.WithStolenRecord(t, own, vb, v4Pool, old.Handle)
		forged = allocatortest.Write(t, s, forged)
		next := podRequest("node-a", "new", v4Pool.Name)
		next.Handle.PodUID, next.Handle.Pod, next.Handle.NetNS = old.Handle.PodUID, old.Handle.Pod, "/var/run/netns/new"
		al := allocator.New(s, nil)
		cands, err := al.TakeoverCandidates(ctx, next.Handle)
		if err != nil || len(cands) != 1 {
			t.Fatalf("takeover candidates: %+v, %v; want the forged record", cands, err)
		}
		_, err = al.TakeOver(ctx, next, cands[0])
		wantRefused(t, "takeover", err, ref, "node-b")
		unchanged(t, s, forged)
	})
}

// TestForgedLenderRefused: a node with no block left to claim borrows
// from another node's object; a lender's object forged with a third
// node's block in it does not lend that node's address.
func TestForgedLenderRefused(t *testing.T) {
	small := ipam.Pool{Name: "small", CIDR: netip.MustParsePrefix("10.8.0.0/27"), BlockSize: 28}
	storeBackends(t, func(t *testing.T, s store.Store) {
		ctx := t.Context()
		a := newAllocator(t, s, small)
		ref := victimSetup(t, a, small)
		// node-b's block full, so that a borrower goes on to node-a.
		for i := 0; ; i++ {
			vb := allocatortest.VictimBlock(t, s, "node-b", ref)
			if !slices.ContainsFunc(vb.Free, func(o int) bool { return small.Permits(vb.Addr(o)) }) {
				break
			}
			if _, err := a.Allocate(ctx, podRequest("node-b", "fill"+string(rune('a'+i)), small.Name)); err != nil {
				t.Fatal(err)
			}
		}
		victim, err := s.GetNode(ctx, "node-b")
		if err != nil {
			t.Fatal(err)
		}
		own, err := s.GetNode(ctx, "node-a")
		if err != nil {
			t.Fatal(err)
		}
		forged, stolen := allocatortest.WithStolenBlock(own, allocatortest.VictimBlock(t, s, "node-b", ref))
		forged = allocatortest.Write(t, s, forged)
		h, err := allocator.New(s, nil).Allocate(ctx, podRequest("node-c", "c0", small.Name))
		if err == nil {
			t.Fatalf("node-c borrowed %v (node-b's %s is the stolen address)", h.IPs, stolen)
		}
		wantRefused(t, "borrow", err, ref, "node-b")
		unchanged(t, s, victim)
		unchanged(t, s, forged)
		if ls := loans(t, s); len(ls) != 0 {
			t.Fatalf("loans after the refused borrow: %v", ls)
		}
	})
}

// TestClaimsRememberedPerVersion: what the allocator remembers of a
// node's claims holds for the object's version it was learnt at (and the
// versions its own writes make), not beyond: a claim deleted and made
// again for another node, with the object rewritten to hold the block
// still (as a pool removed and created again, then a forgery, could
// leave), is found by the next ADD of the long-lived allocator.
func TestClaimsRememberedPerVersion(t *testing.T) {
	storeBackends(t, func(t *testing.T, s store.Store) {
		ctx := t.Context()
		warm := newAllocator(t, s, v4Pool)
		if _, err := warm.Allocate(ctx, podRequest("node-a", "a0", v4Pool.Name)); err != nil {
			t.Fatal(err)
		}
		claims, err := s.ListClaims(ctx, store.ClaimSelector{Node: "node-a"})
		if err != nil || len(claims) != 1 {
			t.Fatalf("node-a's claims: %+v, %v", claims, err)
		}
		if err := s.DeleteClaim(ctx, claims[0]); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateClaim(ctx, store.Claim{BlockRef: claims[0].BlockRef, Node: "node-b"}); err != nil {
			t.Fatal(err)
		}
		own, err := s.GetNode(ctx, "node-a")
		if err != nil {
			t.Fatal(err)
		}
		forged := allocatortest.Write(t, s, own) // same blocks, another version
		_, err = warm.Allocate(ctx, podRequest("node-a", "a1", v4Pool.Name))
		wantRefused(t, "ADD after the claim changed hands", err, claims[0].BlockRef, "node-b")
		unchanged(t, s, forged)
	})
}
