package allocator_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// TestReleaseWarmHint: with the node's hint warm, a release reads the
// handle and commits, nothing more: one read and one transaction, for a
// single-stack and a dual-stack handle (before: a read of the handle, one
// per block, then the transaction).
func TestReleaseWarmHint(t *testing.T) {
	ctx := context.Background()
	v4, v6 := fams[0], fams[1]
	for _, tc := range []struct {
		name string
		sets [][]string
	}{
		{"IPv4", [][]string{set("p4")}},
		{"IPv6", [][]string{set("p6")}},
		{"dual-stack", [][]string{set("p4"), set("p6")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t)
			cs := &countingStore{Store: s}
			a := newAllocator(t, cs)
			for _, p := range []ipam.Pool{v4.pool("p4", 4), v6.pool("p6", 4)} {
				if _, err := a.EnsurePool(ctx, p); err != nil {
					t.Fatal(err)
				}
			}
			var hs []ipam.Handle
			for i := range 3 {
				hs = append(hs, allocate(t, a, "n1", fmt.Sprint("h", i), tc.sets...))
			}
			for _, h := range hs[1:] {
				cs.reads, cs.txns = 0, 0
				freed, err := a.Release(ctx, h.ID)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(freed, addrsOf(h)) {
					t.Fatalf("Release(%s) freed %v, want %v", h.ID, freed, addrsOf(h))
				}
				if cs.reads != 1 || cs.txns != 1 {
					t.Fatalf("warm release of %s did %d reads and %d transactions, want 1 and 1", h.ID, cs.reads, cs.txns)
				}
			}
			// The release kept the hint warm for the next allocation.
			cs.reads, cs.txns = 0, 0
			allocate(t, a, "n1", "after", tc.sets...)
			if cs.reads != 0 || cs.txns != 1 {
				t.Fatalf("allocation after warm releases did %d reads and %d transactions, want 0 and 1", cs.reads, cs.txns)
			}
			checkConsistent(t, a, s)
		})
	}
}

func addrsOf(h ipam.Handle) []netip.Addr {
	var out []netip.Addr
	for _, ip := range h.IPs {
		out = append(out, ip.Addr)
	}
	return out
}

// TestReleaseStaleHint: a release on a hint that another allocator made
// stale (it allocated and released in the node's block meanwhile), or on
// a hint file edited to free another handle's address, frees exactly the
// handle's own addresses; the other handles keep theirs. IPv4 and IPv6.
func TestReleaseStaleHint(t *testing.T) {
	ctx := context.Background()
	forFams(t, func(t *testing.T, f fam) {
		t.Run("another allocator changed the block", func(t *testing.T) {
			a, s := setup(t, f.pool("p", 4))
			other := newAllocator(t, s)
			h0 := allocate(t, a, "n1", "h0", set("p"))
			h1 := allocate(t, a, "n1", "h1", set("p"))
			x := allocate(t, other, "n1", "x", set("p")) // a's hint does not know x
			if _, err := other.Release(ctx, "h0"); err != nil {
				t.Fatal(err)
			}
			y := allocate(t, other, "n1", "y", set("p"))
			freed, err := a.Release(ctx, "h1")
			if err != nil || !slices.Equal(freed, addrsOf(h1)) {
				t.Fatalf("Release(h1) on a stale hint freed %v, %v; want %v", freed, err, addrsOf(h1))
			}
			owners := checkConsistent(t, a, s)
			if owners[x.IPs[0].Addr] != "x" || owners[y.IPs[0].Addr] != "y" || len(owners) != 2 {
				t.Fatalf("after releasing h0 and h1 the owners are %v, want x at %s and y at %s (h0 had %s)", owners, x.IPs[0].Addr, y.IPs[0].Addr, h0.IPs[0].Addr)
			}
		})
		t.Run("hint file says the handle's address is free", func(t *testing.T) {
			a, s := setup(t, f.pool("p", 4))
			files := allocator.FileHints{Dir: t.TempDir()}
			a.SetHints(files)
			h0 := allocate(t, a, "n1", "h0", set("p"))
			allocate(t, a, "n1", "x", set("p"))
			hint, ok := files.Load("n1")
			if !ok {
				t.Fatal("no hint file")
			}
			ord, _ := (ipam.Block{CIDR: h0.IPs[0].Block}).Ordinal(h0.IPs[0].Addr)
			forgeries[0].forge(t, &hint, ord)
			files.Store("n1", hint)
			next := newAllocator(t, s)
			next.SetHints(files)
			// Believing the hint would delete the handle and leave its
			// address taken with no handle to release it.
			freed, err := next.Release(ctx, "h0")
			if err != nil || !slices.Equal(freed, addrsOf(h0)) {
				t.Fatalf("Release(h0) on a forged hint freed %v, %v; want %v", freed, err, addrsOf(h0))
			}
			checkConsistent(t, next, s)
		})
		t.Run("hint file frees another handle's address", func(t *testing.T) {
			a, s := setup(t, f.pool("p", 4))
			files := allocator.FileHints{Dir: t.TempDir()}
			a.SetHints(files)
			h0 := allocate(t, a, "n1", "h0", set("p"))
			x := allocate(t, a, "n1", "x", set("p"))
			hint, ok := files.Load("n1")
			if !ok {
				t.Fatal("no hint file")
			}
			ord, _ := (ipam.Block{CIDR: x.IPs[0].Block}).Ordinal(x.IPs[0].Addr)
			forgeries[0].forge(t, &hint, ord) // x's address free, the block valid
			files.Store("n1", hint)
			next := newAllocator(t, s)
			next.SetHints(files)
			freed, err := next.Release(ctx, "h0")
			if err != nil || !slices.Equal(freed, addrsOf(h0)) {
				t.Fatalf("Release(h0) on a forged hint freed %v, %v; want %v", freed, err, addrsOf(h0))
			}
			if owners := checkConsistent(t, next, s); owners[x.IPs[0].Addr] != "x" || len(owners) != 1 {
				t.Fatalf("after releasing h0 on a forged hint the owners are %v, want only x at %s", owners, x.IPs[0].Addr)
			}
			mustCheckClean(t, s)
		})
	})
}
