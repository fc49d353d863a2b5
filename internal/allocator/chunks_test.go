package allocator_test

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked/kvbackedtest"
)

// Pools whose blocks hold 512 addresses: a node's handles fit one block
// of each, so that releasing them changes few blocks and many records.
var (
	wide4 = ipam.Pool{Name: "wide4", CIDR: netip.MustParsePrefix("10.20.0.0/22"), BlockSize: 23}
	wide6 = ipam.Pool{Name: "wide6", CIDR: netip.MustParsePrefix("fd00:20::/118"), BlockSize: 119}
)

// allocateMany gives node k dual-stack handles, one write each.
func allocateMany(t *testing.T, a *allocator.Allocator, node string, k int) []ipam.Handle {
	t.Helper()
	out := make([]ipam.Handle, k)
	for i := range k {
		h, err := a.Allocate(t.Context(), podRequest(node, fmt.Sprintf("c%03d", i), wide4.Name, wide6.Name))
		if err != nil {
			t.Fatal(err)
		}
		out[i] = h
	}
	return out
}

// releaseAll releases every observed handle with ReleaseObservedAll and
// returns the outcomes' errors that are not nil.
func releaseAll(t *testing.T, a *allocator.Allocator) (released int, errs []error) {
	t.Helper()
	obs, err := a.ObserveHandles(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range a.ReleaseObservedAll(t.Context(), obs) {
		if r.Err != nil {
			errs = append(errs, r.Err)
			continue
		}
		released++
	}
	return released, errs
}

// checkWhole fails unless every handle of hs is either held whole by
// its record (each address owned by it in its block) or released whole
// (no record, each address free), and returns how many are held.
func checkWhole(t *testing.T, s store.Store, node string, hs []ipam.Handle) int {
	t.Helper()
	n, err := s.GetNode(t.Context(), node)
	if errors.Is(err, store.ErrNotFound) {
		n, err = store.Node{Name: node}, nil
	}
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, h := range hs {
		_, recorded := n.Handle(h.ID)
		for _, ip := range h.IPs {
			b, ok := n.Block(store.BlockRef{Pool: ip.Pool, CIDR: ip.Block})
			owner := ""
			if ok {
				owner = b.Owner(ip.Addr)
			}
			if recorded && owner != h.ID || !recorded && owner != "" {
				t.Fatalf("handle %s (recorded: %v): %s is owned by %q", h.ID, recorded, ip.Addr, owner)
			}
		}
		if recorded {
			held++
		}
	}
	return held
}

// TestReleaseObservedAllMany: the controller's release of 300 leaks of
// one node — more records than one write may change — releases all of
// them, in several writes.
func TestReleaseObservedAllMany(t *testing.T) {
	storeBackends(t, func(t *testing.T, s store.Store) {
		c := &counted{Store: s}
		a := newAllocator(t, c, wide4, wide6)
		hs := allocateMany(t, a, "node-a", 300)
		writes := c.writes.Load()
		released, errs := releaseAll(t, a)
		if len(errs) > 0 || released != len(hs) {
			t.Fatalf("released %d of %d; errors (%d): %v", released, len(hs), len(errs), errs[:min(len(errs), 3)])
		}
		if w := c.writes.Load() - writes; w < 3 || w > 6 {
			t.Fatalf("%d writes released 300 handles, want 3 to 6 (each within the store's limits, %+v)", w, s.Limits())
		}
		if held := checkWhole(t, s, "node-a", hs); held != 0 {
			t.Fatalf("%d handles still held", held)
		}
	})
}

// TestReleaseObservedAllCrash: a crash between two writes of a release
// of many handles leaves the handles of the first write released whole
// and the others held whole; a second run releases the rest.
func TestReleaseObservedAllCrash(t *testing.T) {
	for _, b := range kvbackedtest.KVBackends {
		t.Run(b.Name, func(t *testing.T) {
			cs := &kvbackedtest.Counting{Store: b.Open(t)}
			s := kvbacked.New(cs)
			t.Cleanup(func() { s.Close() })
			a := newAllocator(t, s, wide4, wide6)
			hs := allocateMany(t, a, "node-a", 300)
			cs.Reset()
			cs.FailTxn = 2 // the second write
			released, errs := releaseAll(t, a)
			if released == 0 || len(errs) == 0 || released+len(errs) != len(hs) {
				t.Fatalf("released %d, %d errors, of %d handles: want some released before the crash", released, len(errs), len(hs))
			}
			for _, err := range errs {
				if !errors.Is(err, kvbackedtest.ErrCrash) {
					t.Fatalf("a release failed with %v, want the injected crash", err)
				}
			}
			if held := checkWhole(t, s, "node-a", hs); held != len(errs) {
				t.Fatalf("%d handles held after the crash, %d releases failed", held, len(errs))
			}
			// The process starts again.
			cs.FailTxn = 0
			again := newAllocator(t, s)
			if released2, errs := releaseAll(t, again); len(errs) > 0 || released2 != len(hs)-released {
				t.Fatalf("second run released %d of %d; errors: %v", released2, len(hs)-released, errs)
			}
			if held := checkWhole(t, s, "node-a", hs); held != 0 {
				t.Fatalf("%d handles held after the second run", held)
			}
		})
	}
}
