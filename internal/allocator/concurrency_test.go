package allocator_test

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/storetest"
)

// TestConcurrent: several allocators (as separate processes would
// be) allocate dual-stack addresses for four nodes at once from pools
// small enough that they claim every block and borrow, and release half
// of them. No address ever has two holders, every allocation that
// succeeded is held by its handle, every release left nothing behind.
func TestConcurrent(t *testing.T) {
	p4 := ipam.Pool{Name: "c4", CIDR: netip.MustParsePrefix("10.6.0.0/26"), BlockSize: 29}
	p6 := ipam.Pool{Name: "c6", CIDR: netip.MustParsePrefix("fd00:6::/122"), BlockSize: 125}
	storeBackends(t, func(t *testing.T, s store.Store) {
		newAllocator(t, s, p4, p6)
		const procs, nodes, each = 3, 4, 10
		type result struct {
			h        ipam.Handle
			released bool
		}
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			results []result
			errs    []error
		)
		for p := range procs {
			a := allocator.New(s, nil)
			for n := range nodes {
				wg.Go(func() {
					node := fmt.Sprint("node-", n)
					for i := range each {
						h, err := a.Allocate(t.Context(), podRequest(node, fmt.Sprintf("p%d-n%d-%d", p, n, i), "c4", "c6"))
						if errors.Is(err, allocator.ErrExhausted) {
							continue
						}
						r := result{h: h}
						if err == nil && i%2 == 0 {
							_, err = a.Release(t.Context(), node, h.ID)
							r.released = true
						}
						mu.Lock()
						if err != nil {
							errs = append(errs, err)
						} else {
							results = append(results, r)
						}
						mu.Unlock()
					}
				})
			}
		}
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("errors: %v", errs)
		}
		held := storetest.Holders(t, s)
		want := 0
		for _, r := range results {
			for _, ip := range r.h.IPs {
				owner, ok := held[ip.Addr]
				switch {
				case r.released && ok && owner == r.h.ID:
					t.Fatalf("%s still held by released %s", ip.Addr, r.h.ID)
				case !r.released && owner != r.h.ID:
					t.Fatalf("%s allocated to %s is held by %q", ip.Addr, r.h.ID, owner)
				}
			}
			if !r.released {
				want += len(r.h.IPs)
			}
		}
		if len(held) != want {
			t.Fatalf("%d addresses held, the allocations that stand hold %d", len(held), want)
		}
		if len(results) < procs*nodes*each/2 {
			t.Fatalf("only %d of %d allocations succeeded", len(results), procs*nodes*each)
		}
		// Everything released: nothing left, no loan.
		a := allocator.New(s, nil)
		for _, r := range results {
			if !r.released {
				if _, err := a.Release(t.Context(), r.h.Node, r.h.ID); err != nil {
					t.Fatal(err)
				}
			}
		}
		if h := storetest.Holders(t, s); len(h) != 0 {
			t.Fatalf("after releasing everything %d addresses are held", len(h))
		}
		if l := loans(t, s); len(l) != 0 {
			t.Fatalf("after releasing everything loans remain: %q", l)
		}
	})
}

// TestDeletePoolRacesAllocate: pool removal running against
// allocations never leaves an address in a removed pool, and either
// refuses (addresses in use) or removes every block and claim.
func TestDeletePoolRacesAllocate(t *testing.T) {
	storeBackends(t, func(t *testing.T, s store.Store) {
		for round := range 6 {
			pool := v4Pool
			pool.Name = fmt.Sprint("race", round)
			a := newAllocator(t, s, pool)
			var wg sync.WaitGroup
			var allocErr, delErr error
			var h ipam.Handle
			wg.Go(func() {
				h, allocErr = allocator.New(s, nil).Allocate(t.Context(), podRequest(fmt.Sprint("node-", round%2), fmt.Sprint("r", round), pool.Name))
			})
			wg.Go(func() { delErr = a.DeletePool(t.Context(), pool.Name) })
			wg.Wait()
			_, poolErr := s.GetPool(t.Context(), pool.Name)
			claims, err := s.ListClaims(t.Context(), store.ClaimSelector{Pool: pool.Name})
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case delErr == nil:
				if allocErr == nil {
					t.Fatalf("round %d: the pool was removed and an allocation in it succeeded: %+v", round, h)
				}
				if !errors.Is(poolErr, store.ErrNotFound) || len(claims) != 0 {
					t.Fatalf("round %d: after removal: pool %v, claims %+v", round, poolErr, claims)
				}
				for addr, id := range storetest.Holders(t, s) {
					if pool.CIDR.Contains(addr) {
						t.Fatalf("round %d: %s of the removed pool held by %s", round, addr, id)
					}
				}
			case errors.Is(delErr, allocator.ErrPoolInUse):
				if allocErr != nil || poolErr != nil {
					t.Fatalf("round %d: removal refused for addresses in use, but allocation: %v, pool: %v", round, allocErr, poolErr)
				}
				if _, err := a.Release(t.Context(), h.Node, h.ID); err != nil {
					t.Fatal(err)
				}
				if err := a.DeletePool(t.Context(), pool.Name); err != nil {
					t.Fatalf("round %d: removal once empty: %v", round, err)
				}
			default:
				t.Fatalf("round %d: DeletePool: %v", round, delErr)
			}
		}
	})
}
