package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// testNodeConcurrentAllocations: writers that each read the node object,
// allocate one dual-stack address pair in it and compare-and-swap it back
// — retrying on ErrConflict, as the allocator does — lose no allocation
// and never give an address to two handles.
func testNodeConcurrentAllocations(t *testing.T, s store.Store) {
	ctx := t.Context()
	const writers, each = 6, 5
	if _, err := s.CreateNode(ctx, DualStackNode(t, "node-a", 0)); err != nil {
		t.Fatal(err)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		done []string
	)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				h := handle("node-a", fmt.Sprintf("w%d-%d", w, i))
				var err error
				for attempt := 0; attempt < 200; attempt++ {
					var n store.Node
					if n, err = s.GetNode(ctx, "node-a"); err != nil {
						break
					}
					if _, half := n.Handle(h.ID); half {
						// An earlier attempt's conflict came after it
						// wrote one family's block (a backend whose node
						// object's blocks are objects of their own):
						// released, as the allocator releases a partial
						// handle, and allocated again.
						n = clone(n)
						if err = tryRelease(&n, h.ID); err != nil {
							break
						}
					}
					hh := h
					for _, f := range families {
						if err = tryAssign(&n, f.pool, f.pool.BlockAt(1), &hh); err != nil {
							break
						}
					}
					if err != nil {
						break
					}
					n.Handles = append(n.Handles, hh)
					if _, err = s.UpdateNode(ctx, n); !errors.Is(err, store.ErrConflict) {
						break
					}
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", h.ID, err))
				} else {
					done = append(done, h.ID)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("allocations failed: %v", errs)
	}
	n, err := s.GetNode(ctx, "node-a")
	noErr(t, err, "GetNode")
	var held []string
	for _, h := range n.Handles {
		held = append(held, h.ID)
	}
	slices.Sort(held)
	slices.Sort(done)
	if !slices.Equal(held, done) {
		t.Fatalf("the node object holds %d handles %q, the writers committed %d: %q", len(held), held, len(done), done)
	}
	// DecodeNode validated the object: no address has two owners. Say it
	// with the addresses too.
	seen := map[string]string{}
	for _, h := range n.Handles {
		for _, ip := range h.IPs {
			if other, dup := seen[ip.Addr.String()]; dup {
				t.Fatalf("%s held by %s and %s", ip.Addr, other, h.ID)
			}
			seen[ip.Addr.String()] = h.ID
		}
	}
}

// testListNodesLendsTo: selecting the lenders of a node returns exactly
// the objects holding a record of that node, also for long names a
// backend indexes by hash, and follows updates that drop the record.
func testListNodesLendsTo(t *testing.T, s store.Store) {
	ctx := t.Context()
	long := strings.Repeat("b", store.MaxNameBytes)
	borrowers := []string{"node-b", "node-b2", "Node-B", long, long[:store.MaxNameBytes-1] + "c"}
	var lenders []store.Node
	for i, borrower := range borrowers {
		n := dualStackNodeAt(t, fmt.Sprintf("lender-%d", i), 1, uint64(i+1))
		h := handle(borrower, "borrowed")
		assign(t, &n, families[i%2].pool, families[i%2].pool.BlockAt(uint64(i+1)), &h)
		n.Handles = append(n.Handles, h)
		created, err := s.CreateNode(ctx, n)
		noErr(t, err, "CreateNode")
		if got := created.LendsTo(); !reflect.DeepEqual(got, []string{borrower}) {
			t.Fatalf("LendsTo() = %q", got)
		}
		lenders = append(lenders, created)
	}
	_, err := s.CreateNode(ctx, dualStackNodeAt(t, "node-b", 3, 10)) // the borrower's own object lends nothing
	noErr(t, err, "CreateNode")
	names := func(ns []store.Node) []string {
		var out []string
		for _, n := range ns {
			out = append(out, n.Name)
		}
		return out
	}
	for i, borrower := range borrowers {
		got, err := s.ListNodes(ctx, store.NodeSelector{LendsTo: borrower})
		noErr(t, err, "ListNodes")
		if want := []string{lenders[i].Name}; !slices.Equal(names(got), want) {
			t.Fatalf("ListNodes(LendsTo %.20q) = %q, want %q", borrower, names(got), want)
		}
		sameNode(t, got[0], lenders[i], "listed lender")
	}
	got, err := s.ListNodes(ctx, store.NodeSelector{LendsTo: "node"})
	noErr(t, err, "ListNodes")
	if len(got) != 0 {
		t.Fatalf("ListNodes(LendsTo node) = %q, want none", names(got))
	}
	// The borrower's address is released: the lender lends nothing more.
	n := clone(lenders[0])
	release(t, &n, ipam.HandleID("net1", "borrowed", "eth0"))
	_, err = s.UpdateNode(ctx, n)
	noErr(t, err, "UpdateNode")
	got, err = s.ListNodes(ctx, store.NodeSelector{LendsTo: borrowers[0]})
	noErr(t, err, "ListNodes")
	if len(got) != 0 {
		t.Fatalf("after the release ListNodes(LendsTo %s) = %q, want none", borrowers[0], names(got))
	}
	// A lender deleted: gone from the selection too.
	noErr(t, s.DeleteNode(ctx, lenders[1]), "DeleteNode")
	got, err = s.ListNodes(ctx, store.NodeSelector{LendsTo: borrowers[1]})
	noErr(t, err, "ListNodes")
	if len(got) != 0 {
		t.Fatalf("after delete ListNodes(LendsTo %s) = %q, want none", borrowers[1], names(got))
	}
}

func testListNodesAll(t *testing.T, s store.Store) {
	ctx := t.Context()
	got, err := s.ListNodes(ctx, store.NodeSelector{})
	noErr(t, err, "ListNodes of an empty store")
	if len(got) != 0 {
		t.Fatalf("empty store lists %d node objects", len(got))
	}
	var want []store.Node
	for i, name := range []string{"c", "a", "b"} {
		n, err := s.CreateNode(ctx, dualStackNodeAt(t, name, 2, uint64(i+1)))
		noErr(t, err, "CreateNode")
		want = append(want, n)
	}
	slices.SortFunc(want, func(a, b store.Node) int { return strings.Compare(a.Name, b.Name) })
	got, err = s.ListNodes(ctx, store.NodeSelector{})
	noErr(t, err, "ListNodes")
	if len(got) != len(want) {
		t.Fatalf("ListNodes returned %d objects, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Name != want[i].Name || got[i].Version != want[i].Version {
			t.Fatalf("ListNodes[%d] = %q at %q, want %q at %q", i, got[i].Name, got[i].Version, want[i].Name, want[i].Version)
		}
		sameNode(t, got[i], want[i], "listed node object")
	}
}
