package allocator_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"sync"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// TestConcurrentAllocateRelease runs many goroutines, on several nodes and
// each with its own Allocator over one store, allocating dual-stack
// addresses from small pools and releasing them (by handle and by
// address). The IPv6 pool runs out first, so a failing request has already
// planned its IPv4 address. No address may ever be handed to two live
// handles, and the final state must be exactly the handles the workers
// still hold.
func TestConcurrentAllocateRelease(t *testing.T) {
	const workers, nodes = 8, 4
	iters := 150
	if testing.Short() {
		iters = 40
	}
	p4 := ipam.Pool{Name: "c4", CIDR: prefix("10.4.0.0/26"), BlockSize: 29}
	p6 := ipam.Pool{Name: "c6", CIDR: prefix("fd04::/123"), BlockSize: 125}
	_, s := setup(t, p4, p6)
	ctx := context.Background()

	var (
		mu     sync.Mutex
		held   = map[netip.Addr]string{} // address -> live handle, as the workers know it
		dups   []string
		counts = map[string]int{}
	)
	claim := func(h ipam.Handle) {
		mu.Lock()
		defer mu.Unlock()
		for _, ip := range h.IPs {
			if prev, ok := held[ip.Addr]; ok {
				dups = append(dups, fmt.Sprintf("%s given to %s while %s holds it", ip.Addr, h.ID, prev))
			}
			held[ip.Addr] = h.ID
		}
	}
	// unclaim forgets addresses before they are released in the store, so
	// that a quick re-allocation by another worker is not a false alarm.
	unclaim := func(addrs ...netip.Addr) {
		mu.Lock()
		defer mu.Unlock()
		for _, a := range addrs {
			delete(held, a)
		}
	}
	count := func(k string) { mu.Lock(); counts[k]++; mu.Unlock() }

	live := make([]map[string]ipam.Handle, workers)
	var wg sync.WaitGroup
	for w := range workers {
		live[w] = map[string]ipam.Handle{}
		wg.Go(func() {
			a := newAllocator(t, s)
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			node := fmt.Sprintf("node-%d", w%nodes)
			mine := live[w]
			pick := func() ipam.Handle {
				for _, h := range mine {
					return h
				}
				return ipam.Handle{}
			}
			for i := range iters {
				switch x := rng.IntN(10); {
				case x < 5 || len(mine) == 0:
					id := fmt.Sprintf("w%d-%d", w, i)
					h, err := a.Allocate(ctx, request(node, id, set("c4"), set("c6")))
					switch {
					case err == nil:
						if len(h.IPs) != 2 {
							t.Errorf("%s: %d addresses, want both families", id, len(h.IPs))
						}
						claim(h)
						mine[id] = h
						count("allocated")
					case errors.Is(err, allocator.ErrExhausted):
						count("exhausted")
					case errors.Is(err, allocator.ErrContended):
						count("contended")
					default:
						t.Errorf("Allocate(%s): %v", id, err)
						return
					}
				case x < 9:
					h := pick()
					unclaim(h.IPs[0].Addr, h.IPs[1].Addr)
					freed, err := a.Release(ctx, h.ID)
					if err != nil {
						t.Errorf("Release(%s): %v", h.ID, err)
						return
					}
					if len(freed) != 2 {
						t.Errorf("Release(%s) freed %v", h.ID, freed)
					}
					delete(mine, h.ID)
					count("released")
				default:
					h := pick()
					ip := h.IPs[rng.IntN(2)].Addr
					unclaim(ip)
					owner, err := a.ReleaseAddr(ctx, ip)
					if err != nil || owner.ID != h.ID {
						t.Errorf("ReleaseAddr(%s) = %s, %v, want %s", ip, owner.ID, err, h.ID)
						return
					}
					// The handle keeps its other address; release it whole.
					rest := h.IPs[0].Addr
					if rest == ip {
						rest = h.IPs[1].Addr
					}
					unclaim(rest)
					if _, err := a.Release(ctx, h.ID); err != nil {
						t.Errorf("Release(%s): %v", h.ID, err)
						return
					}
					delete(mine, h.ID)
					count("released-by-address")
				}
			}
		})
	}
	wg.Wait()
	t.Logf("outcomes: %v", counts)
	for _, d := range dups {
		t.Error(d)
	}
	if counts["allocated"] < workers || counts["exhausted"] == 0 {
		t.Errorf("outcomes %v: the pools were not contended enough to mean anything", counts)
	}

	a := newAllocator(t, s)
	owners := checkConsistent(t, a, s)
	want := map[netip.Addr]string{}
	for _, m := range live {
		for id, h := range m {
			for _, ip := range h.IPs {
				want[ip.Addr] = id
			}
		}
	}
	if !reflect.DeepEqual(owners, want) {
		t.Errorf("final owners %v, workers hold %v", owners, want)
	}
}

// TestConcurrentSameHandle races many Allocate calls for one handle: they
// must all return the same addresses and allocate only once.
func TestConcurrentSameHandle(t *testing.T) {
	forFams(t, func(t *testing.T, f fam) {
		_, s := setup(t, f.pool("p", 4))
		const n = 8
		got := make([]ipam.Handle, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				a := newAllocator(t, s)
				h, err := a.Allocate(context.Background(), request(fmt.Sprintf("node-%d", i), "same", set("p")))
				if err != nil {
					t.Errorf("Allocate: %v", err)
				}
				got[i] = h
			})
		}
		wg.Wait()
		for i := range got {
			if !reflect.DeepEqual(got[i], got[0]) {
				t.Errorf("call %d got %+v, call 0 got %+v", i, got[i], got[0])
			}
		}
		if owners := checkConsistent(t, newAllocator(t, s), s); len(owners) != 1 {
			t.Errorf("%d addresses allocated for one handle: %v", len(owners), owners)
		}
	})
}
