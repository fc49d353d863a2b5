package storetest

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// testNodeManyAddresses: 5 000 addresses on one node — 2 500 dual-stack
// pods, added 25 to a write — read back whole and equal. Where the
// backend stores a node object as one object (Limits.MaxNodeBytes), the
// write that would take it over that limit is refused with ErrTooLarge
// and writes nothing.
func testNodeManyAddresses(t *testing.T, s store.Store) {
	ctx := t.Context()
	lim := s.Limits()
	const pods, perWrite = 2500, 25
	n, err := s.CreateNode(ctx, store.Node{Name: "node-a"})
	noErr(t, err, "CreateNode")
	for i := 0; i < pods; i += perWrite {
		next := clone(n)
		for j := i; j < i+perWrite; j++ {
			h := handle("node-a", fmt.Sprintf("p%04d", j))
			for _, f := range families {
				take(t, &next, f.pool, &h)
			}
			next.Handles = append(next.Handles, h)
		}
		size := encodedSize(t, next)
		got, err := s.UpdateNode(ctx, next)
		// A backend's encoding of the object differs from MarshalNode's
		// by its framing, not by half.
		if lim.MaxNodeBytes > 0 && size > lim.MaxNodeBytes/2 && errors.Is(err, store.ErrTooLarge) {
			unchangedNode(t, s, n, "after the write over the limit")
			return
		}
		if lim.MaxNodeBytes > 0 && size > lim.MaxNodeBytes {
			t.Fatalf("UpdateNode of a node object of %d bytes, over the limit of %d: %v, want an error wrapping %q", size, lim.MaxNodeBytes, err, store.ErrTooLarge)
		}
		noErr(t, err, fmt.Sprintf("UpdateNode adding pods %d to %d", i, i+perWrite-1))
		sameNode(t, got, next, "UpdateNode's result")
		n = got
	}
	got, err := s.GetNode(ctx, "node-a")
	noErr(t, err, "GetNode")
	if got.Version != n.Version {
		t.Fatalf("GetNode version %q, the last write returned %q", got.Version, n.Version)
	}
	sameNode(t, got, n, "GetNode")
	addrs := 0
	for _, h := range got.Handles {
		addrs += len(h.IPs)
	}
	if len(got.Handles) != pods || addrs != 2*pods {
		t.Fatalf("GetNode: %d records holding %d addresses, want %d holding %d", len(got.Handles), addrs, pods, 2*pods)
	}
	all, err := s.ListNodes(ctx, store.NodeSelector{})
	noErr(t, err, "ListNodes")
	if len(all) != 1 {
		t.Fatalf("ListNodes: %d node objects, want 1", len(all))
	}
	sameNode(t, all[0], n, "ListNodes")
}

// testNodeTooLarge: where a node object is one stored object
// (Limits.MaxNodeBytes), one over the limit is refused with ErrTooLarge,
// created or updated, and the stored one stays as it was. Where it is
// stored in parts, it has no limit: it grows, by writes within the write
// limits, past the bound of the objects stored whole (MaxObjectBytes),
// and reads back whole.
func testNodeTooLarge(t *testing.T, s store.Store) {
	ctx := t.Context()
	lim := s.Limits()
	if lim.MaxObjectBytes <= 0 {
		t.Fatalf("Limits().MaxObjectBytes = %d: every backend must bound its objects", lim.MaxObjectBytes)
	}
	p := families[1].pool
	p.BlockSize = 112 // 2^16 addresses
	n := store.Node{Name: "node-a", Blocks: []ipam.Block{blockOf(p, 0, "node-a")}}
	created, err := s.CreateNode(ctx, n)
	noErr(t, err, "CreateNode")
	if lim.MaxNodeBytes == 0 {
		testNodeWithoutLimit(t, s, created, p, lim)
		return
	}
	big := clone(created)
	netns := "/var/run/netns/" + strings.Repeat("n", 4000)
	for i := range 1 << 16 {
		h := handle("node-a", fmt.Sprintf("c%05d", i))
		h.NetNS = netns
		assign(t, &big, p, p.BlockAt(0), &h)
		big.Handles = append(big.Handles, h)
		if i%32 == 31 && encodedSize(t, big) > lim.MaxNodeBytes {
			break // encoding is linear in the object: check now and then
		}
	}
	_, err = s.UpdateNode(ctx, big)
	wantErr(t, err, store.ErrTooLarge, "UpdateNode over the limit")
	unchangedNode(t, s, created, "after a refused update")
	big = rename(big, "node-b")
	_, err = s.CreateNode(ctx, big)
	wantErr(t, err, store.ErrTooLarge, "CreateNode over the limit")
	_, err = s.GetNode(ctx, "node-b")
	wantErr(t, err, store.ErrNotFound, "GetNode after a refused create")
}

// testNodeWithoutLimit is testNodeTooLarge where a node object has no
// limit: records of 16 KiB each, written a few dozen at a time, each
// write in a block of its own (a backend may keep a block's records in
// one object, bounded by MaxObjectBytes), until the object encodes to
// more than MaxObjectBytes.
func testNodeWithoutLimit(t *testing.T, s store.Store, n store.Node, p ipam.Pool, lim store.Limits) {
	ctx := t.Context()
	netns := "/var/run/netns/" + strings.Repeat("n", 16<<10)
	perWrite := min(40, lim.MaxObjectBytes/(2*len(netns)))
	if lim.MaxWriteParts > 0 {
		perWrite = min(perWrite, lim.MaxWriteParts-2) // the head and the block
	}
	if lim.MaxWriteBytes > 0 {
		perWrite = min(perWrite, lim.MaxWriteBytes/(2*len(netns)))
	}
	if perWrite < 1 {
		t.Fatalf("Limits() = %+v: a write cannot add one record of %d bytes", lim, len(netns))
	}
	for i := 0; encodedSize(t, n) <= lim.MaxObjectBytes; i++ {
		next := clone(n)
		if i > 0 {
			next.Blocks = append(next.Blocks, blockOf(p, uint64(i), "node-a"))
		}
		for j := range perWrite {
			h := handle("node-a", fmt.Sprintf("c%03d-%02d", i, j))
			h.NetNS = netns
			assign(t, &next, p, p.BlockAt(uint64(i)), &h)
			next.Handles = append(next.Handles, h)
		}
		got, err := s.UpdateNode(ctx, next)
		noErr(t, err, fmt.Sprintf("UpdateNode adding %d records to a node object of %d bytes", perWrite, encodedSize(t, n)))
		n = got
	}
	got, err := s.GetNode(ctx, "node-a")
	noErr(t, err, "GetNode")
	if got.Version != n.Version {
		t.Fatalf("GetNode version %q, the last write returned %q", got.Version, n.Version)
	}
	sameNode(t, got, n, "GetNode of a node object over MaxObjectBytes")
}

// testNodeWriteTooLarge: where one write of a node object is bounded
// (Limits.MaxWriteParts, MaxWriteBytes), a write at the bound is
// accepted and one over it is refused with ErrTooLarge, created or
// updated, and writes nothing. A backend bounds a node object or one
// write of it.
func testNodeWriteTooLarge(t *testing.T, s store.Store) {
	ctx := t.Context()
	lim := s.Limits()
	if lim.MaxWriteParts <= 0 && lim.MaxWriteBytes <= 0 {
		if lim.MaxNodeBytes <= 0 {
			t.Fatalf("Limits() = %+v: the backend bounds neither a node object nor one write of it", lim)
		}
		return // a write is one object: testNodeTooLarge
	}
	p := families[1].pool
	p.BlockSize = 112 // 2^16 addresses
	n, err := s.CreateNode(ctx, store.Node{Name: "node-a", Blocks: []ipam.Block{blockOf(p, 0, "node-a")}})
	noErr(t, err, "CreateNode")
	// adding returns n with k records more, named after prefix.
	adding := func(n store.Node, prefix string, k int, netns string) store.Node {
		next := clone(n)
		for i := range k {
			h := handle(n.Name, fmt.Sprintf("%s%05d", prefix, i))
			if netns != "" {
				h.NetNS = netns
			}
			assign(t, &next, p, p.BlockAt(0), &h)
			next.Handles = append(next.Handles, h)
		}
		return next
	}
	if m := lim.MaxWriteParts; m > 0 {
		// The head, the block and the records.
		at := adding(n, "a", m-2, "")
		got, err := s.UpdateNode(ctx, at)
		noErr(t, err, fmt.Sprintf("UpdateNode writing %d parts, the limit", m))
		sameNode(t, got, at, "UpdateNode's result")
		n = got
		_, err = s.UpdateNode(ctx, adding(n, "b", m-1, ""))
		wantErr(t, err, store.ErrTooLarge, fmt.Sprintf("UpdateNode writing %d parts, one over the limit", m+1))
		unchangedNode(t, s, n, "after a refused update")
		_, err = s.CreateNode(ctx, rename(adding(store.Node{Name: "node-a", Blocks: []ipam.Block{blockOf(p, 0, "node-a")}}, "c", m-1, ""), "node-b"))
		wantErr(t, err, store.ErrTooLarge, fmt.Sprintf("CreateNode writing %d parts, one over the limit", m+1))
		_, err = s.GetNode(ctx, "node-b")
		wantErr(t, err, store.ErrNotFound, "GetNode after a refused create")
	}
	if m := lim.MaxWriteBytes; m > 0 {
		// Four records of a quarter of the limit each, and their keys.
		netns := "/var/run/netns/" + strings.Repeat("n", m/4)
		_, err = s.UpdateNode(ctx, adding(n, "d", 4, netns))
		wantErr(t, err, store.ErrTooLarge, fmt.Sprintf("UpdateNode writing 4 records of %d bytes, over the limit of %d", len(netns), m))
		unchangedNode(t, s, n, "after a refused update")
	}
}

// take gives h the first free address of p in n's last block of p, in
// place, adding the next block of p when that one is full (or n holds
// none).
func take(t testing.TB, n *store.Node, p ipam.Pool, h *ipam.Handle) {
	t.Helper()
	var last *ipam.Block
	held := uint64(0)
	for i := range n.Blocks {
		if n.Blocks[i].Pool == p.Name {
			last, held = &n.Blocks[i], held+1
		}
	}
	if last != nil && tryAssign(n, p, last.CIDR, h) == nil {
		return
	}
	b := blockOf(p, held+1, n.Name)
	n.Blocks = append(n.Blocks, b)
	assign(t, n, p, b.CIDR, h)
}

// encodedSize is the size of n's encoding (store.MarshalNode).
func encodedSize(t testing.TB, n store.Node) int {
	t.Helper()
	b, err := store.MarshalNode(n)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

// unchangedNode fails unless n's stored object is still n.
func unchangedNode(t testing.TB, s store.Store, n store.Node, what string) {
	t.Helper()
	got, err := s.GetNode(t.Context(), n.Name)
	noErr(t, err, "GetNode "+what)
	if got.Version != n.Version {
		t.Fatalf("GetNode %s: version %q, want %q", what, got.Version, n.Version)
	}
	sameNode(t, got, n, "GetNode "+what)
}

// rename returns n as node name's, not stored.
func rename(n store.Node, name string) store.Node {
	out := store.Node{Name: name, Loans: n.Loans}
	for _, b := range n.Blocks {
		b.Node = name
		out.Blocks = append(out.Blocks, b)
	}
	for _, h := range n.Handles {
		h.Node = name
		out.Handles = append(out.Handles, h)
	}
	return out
}
