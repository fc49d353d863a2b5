package allocator_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// TestObserve: one read for a reconcile pass gives what
// ObserveHandles, Blocks(""), AffineNodes and Pools give one by one, plus
// the orphan claims (a claim whose node's object does not hold its
// block), in three lists and no read of a single object. IPv4 and IPv6
// side by side, a borrowed part included.
func TestObserve(t *testing.T) {
	small := ipam.Pool{Name: "small", CIDR: netip.MustParsePrefix("10.8.0.0/27"), BlockSize: 28}
	storeBackends(t, func(t *testing.T, s store.Store) {
		ctx := t.Context()
		a := newAllocator(t, s, small, v6Pool)
		for _, node := range []string{"node-a", "node-b"} {
			if _, err := a.Allocate(ctx, podRequest(node, node, "small")); err != nil {
				t.Fatal(err)
			}
		}
		// node-c: IPv6 in its own block, IPv4 borrowed (small has two blocks).
		if _, err := a.Allocate(ctx, podRequest("node-c", "c", "small", "v6")); err != nil {
			t.Fatal(err)
		}
		orphans := map[string]store.BlockRef{
			"node-a": {Pool: "v6", CIDR: v6Pool.BlockAt(5)},
			"node-d": {Pool: "v6", CIDR: v6Pool.BlockAt(6)},
		}
		for node, ref := range orphans {
			if _, err := s.CreateClaim(ctx, store.Claim{BlockRef: ref, Node: node}); err != nil {
				t.Fatal(err)
			}
		}

		c := &counted{Store: s}
		snap, err := allocator.New(c, nil).Observe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// counted sees the lists of claims and node objects and every
		// single-object read (the list of pools it lets through).
		if n := c.reads.Load(); n != 2 {
			t.Errorf("Observe made %d reads of claims and node objects, want the 2 lists", n)
		}
		obs, err := a.ObserveHandles(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(snap.Handles) != 3 || len(obs) != 3 {
			t.Fatalf("handles: %d observed with the snapshot, %d by ObserveHandles; want 3", len(snap.Handles), len(obs))
		}
		for i := range obs {
			if snap.Handles[i].Handle.ID != obs[i].Handle.ID || len(snap.Handles[i].Parts) != len(obs[i].Parts) ||
				!slices.Equal(sortedAddrs(snap.Handles[i].Handle.IPs), sortedAddrs(obs[i].Handle.IPs)) {
				t.Errorf("handle %d: snapshot %+v, ObserveHandles %+v", i, snap.Handles[i], obs[i])
			}
		}
		blocks, err := a.Blocks(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(snap.Blocks) != len(blocks) || len(blocks) != 3 {
			t.Fatalf("blocks: snapshot %d, Blocks %d; want 3", len(snap.Blocks), len(blocks))
		}
		for i := range blocks {
			if snap.Blocks[i].CIDR != blocks[i].CIDR || snap.Blocks[i].Node != blocks[i].Node || snap.Blocks[i].InUse() != blocks[i].InUse() {
				t.Errorf("block %d: snapshot %+v, Blocks %+v", i, snap.Blocks[i], blocks[i])
			}
		}
		affine, err := a.AffineNodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(affine) != len(snap.Affine) || affine["node-d"] != 1 || snap.Affine["node-d"] != 1 {
			t.Errorf("affine nodes: snapshot %v, AffineNodes %v", snap.Affine, affine)
		}
		for n, k := range affine {
			if snap.Affine[n] != k {
				t.Errorf("affine nodes: snapshot %v, AffineNodes %v", snap.Affine, affine)
			}
		}
		if len(snap.Orphans) != 2 {
			t.Errorf("orphans %v, want %v", snap.Orphans, orphans)
		}
		for node, ref := range orphans {
			if !slices.Equal(snap.Orphans[node], []store.BlockRef{ref}) {
				t.Errorf("orphans of %s: %v, want %v", node, snap.Orphans[node], ref)
			}
		}
		if len(snap.Pools) != 2 || snap.Pools[0].Name != "small" || snap.Pools[1].Name != "v6" {
			t.Errorf("pools %+v", snap.Pools)
		}
	})
}
