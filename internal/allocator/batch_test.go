package allocator_test

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/storetest"
)

// TestAllocateTogether: allocations of one node that wait for each other
// in one process are written together, dual-stack, while the node's
// blocks have room, and alone when they need a block claim or a requested
// address, or repeat a handle: fewer writes than allocations, no address
// held twice, every allocation held by its handle with one address per
// range set, and a repeated ADD gets the addresses of the first.
func TestAllocateTogether(t *testing.T) {
	p4 := ipam.Pool{Name: "t4", CIDR: netip.MustParsePrefix("10.7.0.0/22"), BlockSize: 26}
	p6 := ipam.Pool{Name: "t6", CIDR: netip.MustParsePrefix("fd00:7::/118"), BlockSize: 122}
	storeBackends(t, func(t *testing.T, s store.Store) {
		c := &counted{Store: s}
		a := newAllocator(t, c, p4, p6)
		// The node's first blocks and its object.
		if _, err := a.Allocate(t.Context(), podRequest("node-a", "first", "t4", "t6")); err != nil {
			t.Fatal(err)
		}
		const workers, each = 16, 12 // 193 allocations: the /26 and /122 fill, new blocks are claimed
		writes := c.writes.Load()
		var wg sync.WaitGroup
		var mu sync.Mutex
		got := map[string]ipam.Handle{}
		var errs []error
		for w := range workers {
			wg.Go(func() {
				for i := range each {
					container := fmt.Sprintf("w%d-%d", w, i)
					req := podRequest("node-a", container, "t4", "t6")
					if w == 0 && i == 3 {
						req.Want = []netip.Addr{netip.MustParseAddr("10.7.3.200")} // a requested address: alone
					}
					if w == 1 && i == 5 {
						req = podRequest("node-a", "w1-4", "t4", "t6") // a repeated ADD
					}
					if w == 2 || w == 3 {
						// The same ADDs from two workers at once: often in
						// one batch.
						req = podRequest("node-a", fmt.Sprint("both-", i), "t4", "t6")
					}
					h, err := a.Allocate(t.Context(), req)
					mu.Lock()
					if err != nil {
						errs = append(errs, fmt.Errorf("%s: %w", container, err))
					} else if prev, ok := got[h.ID]; ok && !sameIPs(prev, h) {
						errs = append(errs, fmt.Errorf("repeated ADD of %s: %v, first %v", h.ID, h.IPs, prev.IPs))
					} else {
						got[h.ID] = h
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			t.Error(err)
		}
		allocs := workers * each // of which each are repeated
		n := c.writes.Load() - writes
		t.Logf("%d allocations, %d writes", allocs, n)
		if n >= int64(allocs) {
			t.Errorf("%d writes for %d allocations on one node: none was written together", n, allocs)
		}
		held := storetest.Holders(t, s)
		for id, h := range got {
			if len(h.IPs) != 2 || h.IPs[0].Addr.Is4() == h.IPs[1].Addr.Is4() {
				t.Errorf("%s got %v; want one IPv4 and one IPv6 address", id, h.IPs)
			}
			for _, ip := range h.IPs {
				if held[ip.Addr] != id {
					t.Errorf("%s of %s is held by %q", ip.Addr, id, held[ip.Addr])
				}
			}
		}
		if len(got) != allocs-each-1 {
			t.Errorf("%d handles after %d allocations, %d of them repeated", len(got), allocs, each+1)
		}
		if want := 2 * (len(got) + 1); len(held) != want {
			t.Errorf("%d addresses held, %d handles hold %d", len(held), len(got)+1, want)
		}
		if h, ok := got[ipam.HandleID("net", "w0-3", "eth0")]; ok && h.IPs[0].Addr != netip.MustParseAddr("10.7.3.200") {
			t.Errorf("requested 10.7.3.200, got %v", h.IPs)
		}
		all, err := allocator.New(s, nil).Handles(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != len(got)+1 {
			t.Errorf("the store holds %d handles, %d allocations succeeded", len(all), len(got)+1)
		}
	})
}

func sameIPs(a, b ipam.Handle) bool {
	if len(a.IPs) != len(b.IPs) {
		return false
	}
	for i := range a.IPs {
		if a.IPs[i].Addr != b.IPs[i].Addr {
			return false
		}
	}
	return true
}
