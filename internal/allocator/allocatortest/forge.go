// Package allocatortest writes what someone holding a node's credentials
// can write — the node's own object, rewritten with another node's block
// in it — for the tests of the allocator's claim guard on every backend.
package allocatortest

import (
	"maps"
	"net/netip"
	"slices"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/nodealloc"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// WithStolenBlock returns own with a copy of block vb of another node in
// it: affine to own's node, every address free, the addresses vb's
// handles hold first in its free queue (so that the next allocation from
// it takes the lowest of them), and that address. The object passes
// store.Node.Validate; own is not changed.
func WithStolenBlock(own store.Node, vb ipam.Block) (store.Node, netip.Addr) {
	held := slices.Sorted(maps.Keys(vb.Owners))
	fb := vb
	fb.Node = own.Name
	fb.Owners = nil
	fb.Free = append(held, vb.Free...)
	out := nodealloc.Clone(own)
	out.Blocks = append(out.Blocks, fb)
	var first netip.Addr
	if len(held) > 0 {
		first = vb.Addr(held[0])
	}
	return out, first
}

// WithStolenRecord returns own with a copy of block vb of another node in
// it whose first held address (returned) is recorded for handle h (a
// record of h's own, or a new one), the rest free.
func WithStolenRecord(t testing.TB, own store.Node, vb ipam.Block, p ipam.Pool, h ipam.Handle) (store.Node, netip.Addr) {
	t.Helper()
	out, addr := WithStolenBlock(own, vb)
	if !addr.IsValid() {
		t.Fatalf("block %s holds no address to steal", vb.CIDR)
	}
	out, _, err := nodealloc.TakeAddr(out, p, addr, h)
	if err != nil {
		t.Fatal(err)
	}
	return out, addr
}

// Write writes n over node n.Name's stored object (at whatever version it
// has) through s, as a node's credentials can, and returns it as stored.
func Write(t testing.TB, s store.Store, n store.Node) store.Node {
	t.Helper()
	if err := n.Validate(); err != nil {
		t.Fatalf("forged object: %v", err)
	}
	cur, err := s.GetNode(t.Context(), n.Name)
	if err != nil {
		t.Fatal(err)
	}
	n.Version = cur.Version
	out, err := s.UpdateNode(t.Context(), n)
	if err != nil {
		t.Fatalf("write the forged object of %s: %v", n.Name, err)
	}
	return out
}

// Steal writes node's object with victim's block ref in it
// (WithStolenBlock) and returns the object as stored and the victim's
// address its next allocation would take.
func Steal(t testing.TB, s store.Store, node, victim string, ref store.BlockRef) (store.Node, netip.Addr) {
	t.Helper()
	own, err := s.GetNode(t.Context(), node)
	if err != nil {
		t.Fatal(err)
	}
	vb := VictimBlock(t, s, victim, ref)
	forged, addr := WithStolenBlock(own, vb)
	return Write(t, s, forged), addr
}

// VictimBlock returns block ref of victim's stored object.
func VictimBlock(t testing.TB, s store.Store, victim string, ref store.BlockRef) ipam.Block {
	t.Helper()
	vn, err := s.GetNode(t.Context(), victim)
	if err != nil {
		t.Fatal(err)
	}
	vb, ok := vn.Block(ref)
	if !ok || vb.InUse() == 0 {
		t.Fatalf("node %s holds no address in block %s", victim, ref)
	}
	return vb
}
