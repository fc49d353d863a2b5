package allocator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/consistency"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// stickyFamilies are the table tests' pools: IPv4 and IPv6 side by side.
var stickyFamilies = []struct {
	name string
	pool ipam.Pool
}{{"IPv4", v4Pool}, {"IPv6", v6Pool}}

// stickyRequest is podRequest with the sticky identity of StatefulSet pod
// db/pg-0.
func stickyRequest(node, container string, pools ...string) allocator.Request {
	r := podRequest(node, container, pools...)
	r.Handle.Namespace, r.Handle.Pod = "db", "pg-0"
	r.Handle.Sticky = ipam.StickyID{Kind: ipam.StickyPod, Namespace: "db", Name: "pg-0"}.String()
	return r
}

func checkClean(t *testing.T, s store.Store) {
	t.Helper()
	rep, err := consistency.CheckStore(context.Background(), s)
	if err != nil || len(rep.Problems) != 0 {
		ns, _ := s.ListNodes(context.Background(), store.NodeSelector{})
		for _, n := range ns {
			t.Logf("%s: loans %v", n.Name, n.Loans)
			for _, h := range n.Handles {
				t.Logf("  %s node=%s %v parked=%v", h.ID, h.Node, h.IPs, h.Parked)
			}
		}
		t.Fatalf("check: %+v, %v", rep.Problems, err)
	}
}

// TestStickyKeepsAddress: a parked sticky address comes back to the
// identity's next attachment, on the same node (renamed in place) and on
// another (a loan), and back home again; a repeated DEL changes nothing;
// the store checks clean after each step.
func TestStickyKeepsAddress(t *testing.T) {
	for _, fam := range stickyFamilies {
		t.Run(fam.name, func(t *testing.T) {
			storeBackends(t, func(t *testing.T, s store.Store) {
				ctx := t.Context()
				a := newAllocator(t, s, fam.pool)
				// A neighbour, so the blocks hold more than the sticky pod.
				if _, err := a.Allocate(ctx, podRequest("node-a", "other", fam.pool.Name)); err != nil {
					t.Fatal(err)
				}
				first, err := a.AllocateSticky(ctx, stickyRequest("node-a", "c1", fam.pool.Name))
				if err != nil {
					t.Fatal(err)
				}
				want := first.IPs[0].Addr
				step := func(node, prev, next string) {
					t.Helper()
					for range 2 { // DEL twice: the second finds it parked
						got, parked, err := a.ReleaseOrPark(ctx, node, ipam.HandleID("net", prev, "eth0"))
						if err != nil || !parked || len(got) != 1 || got[0] != want {
							t.Fatalf("DEL of %s on %s: %v parked=%v %v", prev, node, got, parked, err)
						}
					}
					checkClean(t, s)
					h, err := a.AllocateSticky(ctx, stickyRequest(next, strings.Split(next, "-")[1]+prev, fam.pool.Name))
					if err != nil {
						t.Fatal(err)
					}
					if h.IPs[0].Addr != want || h.Node != next {
						t.Fatalf("%s on %s got %v, want %s", h.ID, next, h.IPs, want)
					}
					back, found, err := a.Handle(ctx, next, h.ID)
					if err != nil || !found || back.IPs[0].Addr != want || back.IsParked() {
						t.Fatalf("stored: %+v %v %v", back, found, err)
					}
					t.Logf("%s: %s on %s", h.Sticky, want, next)
					checkClean(t, s)
				}
				step("node-a", "c1", "node-a")    // same node
				step("node-a", "ac1", "node-b")   // to another node
				step("node-b", "bac1", "node-c")  // on to a third
				step("node-c", "cbac1", "node-a") // home again
				if l := loans(t, s); len(l) != 0 {
					t.Fatalf("loans left: %v", l)
				}
			})
		})
	}
}

// TestStickyHeldByLivePod: a second live attachment claiming an identity
// held by a live one gets nothing and an error naming the holder.
func TestStickyHeldByLivePod(t *testing.T) {
	for _, fam := range stickyFamilies {
		t.Run(fam.name, func(t *testing.T) {
			storeBackends(t, func(t *testing.T, s store.Store) {
				ctx := t.Context()
				a := newAllocator(t, s, fam.pool)
				if _, err := a.AllocateSticky(ctx, stickyRequest("node-a", "c1", fam.pool.Name)); err != nil {
					t.Fatal(err)
				}
				for _, node := range []string{"node-a", "node-b"} {
					h, err := a.AllocateSticky(ctx, stickyRequest(node, "forged", fam.pool.Name))
					if !errors.Is(err, allocator.ErrStickyHeld) || !strings.Contains(err.Error(), "net.c1.eth0 of pod db/pg-0") {
						t.Fatalf("on %s: %+v, %v", node, h, err)
					}
					if _, found, _ := a.Handle(ctx, node, ipam.HandleID("net", "forged", "eth0")); found {
						t.Fatal("the refused attachment holds an allocation")
					}
				}
				checkClean(t, s)
			})
		})
	}
}

// TestStickyRaces races a recreated pod's ADD against its predecessor's
// DEL, against the controller's release of the parked address, and two
// first ADDs of one identity on two nodes: never two holders, the store
// checks clean after every iteration.
func TestStickyRaces(t *testing.T) {
	for _, fam := range stickyFamilies {
		t.Run(fam.name, func(t *testing.T) {
			storeBackends(t, func(t *testing.T, s store.Store) {
				ctx := t.Context()
				a := newAllocator(t, s, fam.pool)
				nodes := []string{"node-a", "node-b"}
				prev, err := a.AllocateSticky(ctx, stickyRequest("node-a", "p0", fam.pool.Name))
				if err != nil {
					t.Fatal(err)
				}
				for i := range 25 {
					next := stickyRequest(nodes[(i+1)%2], fmt.Sprintf("p%d", i+1), fam.pool.Name)
					var wg sync.WaitGroup
					var delErr, relErr error
					wg.Go(func() { _, _, delErr = a.ReleaseOrPark(ctx, prev.Node, prev.ID) })
					released := i%2 == 1
					if released {
						// The controller frees the identity's reservation (its
						// StatefulSet went) as observed once parked.
						wg.Go(func() {
							for {
								hs, err := a.StickyHolders(ctx, prev.Sticky, "net", "eth0")
								if err != nil {
									relErr = err
									return
								}
								if len(hs) != 1 || hs[0].Handle.ID != prev.ID {
									return // re-homed first
								}
								if !hs[0].Handle.IsParked() {
									continue
								}
								_, err = a.ReleaseParked(ctx, hs[0])
								if !errors.Is(err, allocator.ErrHandleChanged) {
									relErr = err
								}
								return
							}
						})
					}
					var h ipam.Handle
					var addErr error
					wg.Go(func() {
						for {
							h, addErr = a.AllocateSticky(ctx, next)
							if !errors.Is(addErr, allocator.ErrStickyHeld) {
								return
							}
						}
					})
					wg.Wait()
					if delErr != nil || relErr != nil || addErr != nil {
						t.Fatalf("iteration %d: DEL %v, release %v, ADD %v", i, delErr, relErr, addErr)
					}
					if !released && h.IPs[0].Addr != prev.IPs[0].Addr {
						t.Fatalf("iteration %d: %s got %s, its identity held %s", i, h.ID, h.IPs[0].Addr, prev.IPs[0].Addr)
					}
					hs, err := a.StickyHolders(ctx, h.Sticky, "net", "eth0")
					if err != nil || len(hs) != 1 || hs[0].Handle.ID != h.ID || hs[0].Handle.IsParked() {
						t.Fatalf("iteration %d: holders %+v, %v", i, hs, err)
					}
					checkClean(t, s)
					prev = h
				}
				// Two first ADDs of a new identity on two nodes.
				for i := range 10 {
					var wg sync.WaitGroup
					errs := make([]error, 2)
					for j, node := range nodes {
						r := stickyRequest(node, fmt.Sprintf("q%d-%d", i, j), fam.pool.Name)
						r.Handle.Sticky = fmt.Sprintf("vm/vms/vm%d", i)
						wg.Go(func() { _, errs[j] = a.AllocateSticky(ctx, r) })
					}
					wg.Wait()
					ok := 0
					for _, err := range errs {
						switch {
						case err == nil:
							ok++
						case !errors.Is(err, allocator.ErrStickyHeld):
							t.Fatal(err)
						}
					}
					hs, err := a.StickyHolders(ctx, fmt.Sprintf("vm/vms/vm%d", i), "net", "eth0")
					if ok != 1 || err != nil || len(hs) != 1 {
						t.Fatalf("round %d: %d succeeded (%v), holders %+v %v", i, ok, errs, hs, err)
					}
					checkClean(t, s)
				}
			})
		})
	}
}
