package allocator_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/consistency"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// ReleaseAddrHeldBy of a borrowed address drops the borrower's loan once the
// lender holds nothing more of the handle, and keeps it while it does;
// the store then checks clean. A holder that changed is refused, nothing
// written. IPv4 and IPv6 side by side.
func TestReleaseAddrHeldByBorrowed(t *testing.T) {
	for _, fam := range []struct {
		name string
		pool ipam.Pool
	}{
		{"IPv4", ipam.Pool{Name: "one4", CIDR: netip.MustParsePrefix("10.91.0.0/28"), BlockSize: 28}},
		{"IPv6", ipam.Pool{Name: "one6", CIDR: netip.MustParsePrefix("fd00:91::/124"), BlockSize: 124}},
	} {
		t.Run(fam.name, func(t *testing.T) {
			storeBackends(t, func(t *testing.T, s store.Store) {
				ctx := t.Context()
				a := newAllocator(t, s, fam.pool)
				if _, err := a.Allocate(ctx, podRequest("node-a", "a", fam.pool.Name)); err != nil {
					t.Fatal(err)
				}
				// node-b borrows twice from node-a's block, the pool's only one.
				var got []ipam.Handle
				for _, c := range []string{"b1", "b2"} {
					req := podRequest("node-b", c, fam.pool.Name, fam.pool.Name)
					h, err := a.Allocate(ctx, req)
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, h)
				}
				b1 := got[0]
				loans := func() int {
					n, err := s.GetNode(ctx, "node-b")
					if err != nil {
						t.Fatal(err)
					}
					return len(n.Loans)
				}
				if loans() != 2 {
					t.Fatalf("node-b should hold two loans")
				}
				if _, err := a.ReleaseAddrHeldBy(ctx, fam.pool.Name, b1.IPs[0].Addr, "net.other.eth0"); !errors.Is(err, allocator.ErrHolderChanged) {
					t.Fatalf("release naming another holder: %v, want ErrHolderChanged", err)
				}
				// The first of b1's two borrowed addresses: the loan stays.
				owner, err := a.ReleaseAddrHeldBy(ctx, fam.pool.Name, b1.IPs[0].Addr, b1.ID)
				if err != nil || owner.ID != b1.ID || owner.Node != "node-b" {
					t.Fatalf("release: %+v, %v", owner, err)
				}
				if loans() != 2 {
					t.Fatalf("the loan of %s went while node-a still holds an address of it", b1.ID)
				}
				// The last one: the loan goes with it.
				if _, err := a.ReleaseAddrHeldBy(ctx, fam.pool.Name, b1.IPs[1].Addr, b1.ID); err != nil {
					t.Fatal(err)
				}
				if loans() != 1 {
					t.Fatalf("node-b keeps the loan of %s after its last borrowed address went", b1.ID)
				}
				rep, err := consistency.CheckStore(ctx, s)
				if err != nil || len(rep.Problems) != 0 {
					t.Fatalf("check: %+v, %v", rep.Problems, err)
				}
				if h, found, err := a.Handle(ctx, "node-b", got[1].ID); err != nil || !found || len(h.IPs) != 2 {
					t.Fatalf("the other borrower: %+v %v %v", h, found, err)
				}
			})
		})
	}
}
