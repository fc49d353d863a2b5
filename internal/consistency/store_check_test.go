package consistency

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/allocator/allocatortest"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
)

// brokenCase is a state of the typed store built through the store
// contract, the way a crash or a bug would leave it.
type brokenCase struct {
	name string
	// build makes the state for pool p (the other family's pool exists
	// too, untouched).
	build func(t *testing.T, s *kvbacked.Store, p ipam.Pool)
	// found are the kinds CheckStore must report ("!": not repairable);
	// remaining those a check after RepairStore still reports.
	found, remaining []string
	// after checks the store once repaired.
	after func(t *testing.T, s *kvbacked.Store, p ipam.Pool)
}

var brokenCases = []brokenCase{
	{
		name: "allocations with a borrow are clean",
		build: func(t *testing.T, s *kvbacked.Store, p ipam.Pool) {
			a := newAlloc(s)
			for i, node := range []string{"n1", "n2", "n3"} {
				if _, err := a.Allocate(t.Context(), dualReq(handle(node, "c"+string(rune('0'+i))), p)); err != nil {
					t.Fatal(err)
				}
			}
			n3, err := s.GetNode(t.Context(), "n3")
			if err != nil || len(n3.Loans) != 1 {
				t.Fatalf("n3 should borrow (both blocks claimed): %+v, %v", n3, err)
			}
		},
	},
	{
		name: "block without claim",
		build: func(t *testing.T, s *kvbacked.Store, p ipam.Pool) {
			mustCreateNode(t, s, holding(t, store.Node{Name: "n1"}, p, blockAt(p, 0), handle("n1", "c1")))
		},
		found: []string{"block-without-claim"},
		after: func(t *testing.T, s *kvbacked.Store, p ipam.Pool) {
			c, err := s.GetClaim(t.Context(), blockAt(p, 0))
			if err != nil || c.Node != "n1" {
				t.Fatalf("claim after repair: %+v, %v; want one naming n1", c, err)
			}
		},
	},
	{
		name: "claim without block, no node object (ADD stopped after claiming)",
		build: func(t *testing.T, s *kvbacked.Store, p ipam.Pool) {
			mustClaim(t, s, blockAt(p, 0), "n1")
		},
		found: []string{"claim-without-block"},
		after: func(t *testing.T, s *kvbacked.Store, p ipam.Pool) {
			n, err := s.GetNode(t.Context(), "n1")
			if err != nil {
				t.Fatal(err)
			}
			if b, ok := n.Block(blockAt(p, 0)); !ok || b.InUse() != 0 || len(b.Free) != b.Size() {
				t.Fatalf("node object after repair: %+v; want block %s adopted empty", n, blockAt(p, 0))
			}
		},
	},
	{
		name: "claim without block, node object holds another",
		build: func(t *testing.T, s *kvbacked.Store, p ipam.Pool) {
			mustClaim(t, s, blockAt(p, 1), "n1")
			mustCreateNode(t, s, holding(t, store.Node{Name: "n1"}, p, blockAt(p, 1), handle("n1", "c1")))
			mustClaim(t, s, blockAt(p, 0), "n1")
		},
		found: []string{"claim-without-block"},
	},
	{
		name: "block claimed by another node",
		build: func(t *testing.T, s *kvbacked.Store, p ipam.Pool) {
			mustCreateNode(t, s, holding(t, store.Node{Name: "n1"}, p, blockAt(p, 0), handle("n1", "c1")))
			mustClaim(t, s, blockAt(p, 0), "n2")
		},
		found:     []string{"block-claimed-by-other-node!", "claim-without-block!"},
		remaining: []string{"block-claimed-by-other-node!", "claim-without-block!"},
	},
	{
		name: "another node's block written into a node object (node credentials)",
		build: func(t *testing.T, s *kvbacked.Store, p ipam.Pool) {
			a := newAlloc(s)
			for _, c := range []ipam.Handle{handle("n2", "c2"), handle("n1", "c1")} {
				if _, err := a.Allocate(t.Context(), dualReq(c, p)); err != nil {
					t.Fatal(err)
				}
			}
			forged, _ := allocatortest.Steal(t, s, "n1", "n2", blockAt(p, 0))
			_, err := newAlloc(s).Allocate(t.Context(), dualReq(handle("n1", "c3"), p))
			if !errors.Is(err, allocator.ErrBlockNotClaimed) {
				t.Fatalf("ADD on n1 before the repair: %v; want %v", err, allocator.ErrBlockNotClaimed)
			}
			if now, err := s.GetNode(t.Context(), "n1"); err != nil || now.Version != forged.Version {
				t.Fatalf("the refused ADD wrote n1's object: %+v, %v", now, err)
			}
		},
		found: []string{"duplicate-block!", "block-claimed-by-other-node"},
		after: func(t *testing.T, s *kvbacked.Store, p ipam.Pool) {
			h, err := newAlloc(s).Allocate(t.Context(), dualReq(handle("n1", "c3"), p))
			if err != nil || h.IPs[0].Block != blockAt(p, 1).CIDR {
				t.Fatalf("ADD on n1 after the repair: %+v, %v; want an address of its own block %s", h.IPs, err, blockAt(p, 1))
			}
		},
	},
	{
		name: "block held by two node objects",
		build: func(t *testing.T, s *kvbacked.Store, p ipam.Pool) {
			mustClaim(t, s, blockAt(p, 0), "n1")
			mustCreateNode(t, s, holding(t, store.Node{Name: "n1"}, p, blockAt(p, 0), handle("n1", "c1")))
			mustCreateNode(t, s, holding(t, store.Node{Name: "n2"}, p, blockAt(p, 0), handle("n2", "c2")))
		},
		found:     []string{"duplicate-block!", "block-claimed-by-other-node!", "duplicate-address!"},
		remaining: []string{"duplicate-block!", "block-claimed-by-other-node!", "duplicate-address!"},
	},
	{
		name: "overlapping blocks of one pool",
		build: func(t *testing.T, s *kvbacked.Store, p ipam.Pool) {
			mustClaim(t, s, blockAt(p, 0), "n1")
			mustCreateNode(t, s, holding(t, store.Node{Name: "n1"}, p, blockAt(p, 0), handle("n1", "c1")))
			half := p
			half.BlockSize++
			inner := store.BlockRef{Pool: p.Name, CIDR: netip.PrefixFrom(blockAt(p, 0).CIDR.Addr(), half.BlockSize)}
			mustClaim(t, s, inner, "n2")
			mustCreateNode(t, s, holding(t, store.Node{Name: "n2"}, half, inner, handle("n2", "c2")))
		},
		found:     []string{"duplicate-block!", "duplicate-address!"},
		remaining: []string{"duplicate-block!", "duplicate-address!"},
	},
	{
		name: "loan without record in the lender (ADD stopped before the lender's write)",
		build: func(t *testing.T, s *kvbacked.Store, p ipam.Pool) {
			mustClaim(t, s, blockAt(p, 1), "n2")
			mustCreateNode(t, s, holding(t, store.Node{Name: "n2"}, p, blockAt(p, 1), handle("n2", "c2")))
			mustCreateNode(t, s, store.Node{Name: "n1", Loans: []store.Loan{{Handle: handle("n1", "c1").ID, Lender: "n2"}}})
		},
		found: []string{"loan-without-record"},
		after: func(t *testing.T, s *kvbacked.Store, p ipam.Pool) {
			if n, err := s.GetNode(t.Context(), "n1"); !isErr(err, store.ErrNotFound) {
				t.Fatalf("n1 held only the loan; after repair: %+v, %v; want it gone", n, err)
			}
		},
	},
	{
		name: "loan naming a lender without object",
		build: func(t *testing.T, s *kvbacked.Store, p ipam.Pool) {
			mustClaim(t, s, blockAt(p, 0), "n1")
			n1 := holding(t, store.Node{Name: "n1"}, p, blockAt(p, 0), handle("n1", "c1"))
			n1.Loans = []store.Loan{{Handle: handle("n1", "c1").ID, Lender: "n9"}}
			mustCreateNode(t, s, n1)
		},
		found: []string{"loan-without-record"},
		after: func(t *testing.T, s *kvbacked.Store, p ipam.Pool) {
			n, err := s.GetNode(t.Context(), "n1")
			if err != nil || len(n.Loans) != 0 || len(n.Handles) != 1 {
				t.Fatalf("n1 after repair: %+v, %v; want its record kept and no loan", n, err)
			}
		},
	},
	{
		name: "lender record without loan",
		build: func(t *testing.T, s *kvbacked.Store, p ipam.Pool) {
			mustClaim(t, s, blockAt(p, 1), "n2")
			mustCreateNode(t, s, holding(t, store.Node{Name: "n2"}, p, blockAt(p, 1), handle("n2", "c2"), handle("n1", "c1")))
		},
		found: []string{"record-without-loan"},
		after: func(t *testing.T, s *kvbacked.Store, p ipam.Pool) {
			// The loan lets the handle's DEL find and free the record.
			freed, err := newAlloc(s).Release(t.Context(), "n1", handle("n1", "c1").ID)
			if err != nil || len(freed) != 1 {
				t.Fatalf("DEL after repair freed %v, %v; want the lent address", freed, err)
			}
			if r := mustCheck(t, s); len(r.Problems) != 0 {
				t.Fatalf("after DEL: %s", describe(r.Problems))
			}
		},
	},
	{
		name: "pool marked deleting (interrupted pool rm)",
		build: func(t *testing.T, s *kvbacked.Store, p ipam.Pool) {
			sp, err := s.GetPool(t.Context(), p.Name)
			if err != nil {
				t.Fatal(err)
			}
			sp.Spec.Deleting = true
			if _, err := s.UpdatePool(t.Context(), sp); err != nil {
				t.Fatal(err)
			}
		},
		found:     []string{"pool-deleting!"},
		remaining: []string{"pool-deleting!"},
	},
	{
		name: "block and claim of a pool that does not exist",
		build: func(t *testing.T, s *kvbacked.Store, p ipam.Pool) {
			gone := p
			gone.Name = "gone"
			ref := blockAt(gone, 0)
			mustClaim(t, s, ref, "n1")
			mustCreateNode(t, s, holding(t, store.Node{Name: "n1"}, gone, ref, handle("n1", "c1")))
		},
		found:     []string{"block-without-pool!", "block-without-pool!"},
		remaining: []string{"block-without-pool!", "block-without-pool!"},
	},
	{
		name: "orphan claim of a pool that does not exist",
		build: func(t *testing.T, s *kvbacked.Store, p ipam.Pool) {
			gone := p
			gone.Name = "gone"
			mustClaim(t, s, blockAt(gone, 0), "n1")
		},
		found:     []string{"block-without-pool!", "claim-without-block!"},
		remaining: []string{"block-without-pool!", "claim-without-block!"},
	},
}

// TestCheckStoreBrokenStates builds each broken state through the store
// contract on both real backends, IPv4 and IPv6 side by side: CheckStore
// finds exactly the expected problems, RepairStore fixes the repairable
// ones, a second check finds only what is reported-only, and every
// address held before the repair is still held by the same records.
func TestCheckStoreBrokenStates(t *testing.T) {
	for _, c := range brokenCases {
		t.Run(c.name, func(t *testing.T) {
			for _, f := range typedFamilies {
				t.Run(f.name, func(t *testing.T) {
					typedBackends(t, func(t *testing.T, s *kvbacked.Store) {
						createPools(t, s, tp4, tp6)
						c.build(t, s, f.pool)
						before := held(t, s)
						r := mustCheck(t, s)
						wantKinds(t, "check", r.Problems, c.found...)
						res, err := RepairStore(t.Context(), s)
						if err != nil {
							t.Fatal(err)
						}
						wantKinds(t, "repair found", res.Found, c.found...)
						wantKinds(t, "repair remaining", res.Remaining, c.remaining...)
						repaired := 0
						for _, p := range res.Found {
							if p.Repairable {
								repaired++
							}
						}
						if len(res.Actions) < repaired {
							t.Fatalf("%d repairable problems, %d actions: %+v", repaired, len(res.Actions), res.Actions)
						}
						wantKinds(t, "check after repair", mustCheck(t, s).Problems, c.remaining...)
						after := held(t, s)
						for a, hs := range before {
							if !slices.Equal(after[a], hs) {
								t.Fatalf("%s was held by %v before the repair, by %v after", a, hs, after[a])
							}
						}
						if c.after != nil {
							c.after(t, s, f.pool)
						}
					})
				})
			}
		})
	}
}
