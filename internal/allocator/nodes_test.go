package allocator_test

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
)

var nodeFamilies = []struct {
	name string
	pool ipam.Pool
}{
	{"IPv4", ipam.Pool{Name: "n4", CIDR: prefix("10.45.0.0/24"), BlockSize: 30}},
	{"IPv6", ipam.Pool{Name: "n6", CIDR: prefix("fd45::/120"), BlockSize: 126}},
}

func TestFreeNodeBlocks(t *testing.T) {
	ctx := context.Background()
	for _, f := range nodeFamilies {
		t.Run(f.name, func(t *testing.T) {
			a, s := setup(t, f.pool)
			// node-b: blocks of 4 addresses (IPv4: 2 usable after network
			// and broadcast). Three allocations make two blocks; release
			// the ones of the first block so it is empty.
			var hs []ipam.Handle
			for _, id := range []string{"b1", "b2", "b3", "b4", "b5"} {
				hs = append(hs, allocate(t, a, "node-b", id, set(f.pool.Name)))
			}
			a1 := allocate(t, a, "node-a", "a1", set(f.pool.Name))
			emptyBlock := hs[0].IPs[0].Block
			for _, h := range hs {
				if h.IPs[0].Block == emptyBlock {
					if _, err := a.Release(ctx, h.ID); err != nil {
						t.Fatal(err)
					}
				}
			}
			// An orphan affinity record of node-b.
			orphan := f.pool.BlockAt(f.pool.NumBlocks() - 1)
			if err := s.Txn(ctx, nil, []kv.Op{{Key: allocator.AffinityKey("node-b", f.pool.Name, orphan), Value: []byte("x")}}); err != nil {
				t.Fatal(err)
			}
			nodes, err := a.AffineNodes(ctx)
			if err != nil {
				t.Fatal(err)
			}
			nonEmpty := map[string]bool{}
			for _, h := range hs {
				if h.IPs[0].Block != emptyBlock {
					nonEmpty[h.IPs[0].Block.String()] = true
				}
			}
			if nodes["node-a"] != 1 || nodes["node-b"] != 2+len(nonEmpty) {
				t.Fatalf("AffineNodes = %v (node-b non-empty blocks %v)", nodes, nonEmpty)
			}

			res, err := a.FreeNodeBlocks(ctx, "node-b")
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Freed) != 1 || res.Freed[0].Block != emptyBlock {
				t.Errorf("freed %v, want %v", res.Freed, emptyBlock)
			}
			if len(res.Dropped) != 1 || res.Dropped[0].Block != orphan {
				t.Errorf("dropped %v, want %v", res.Dropped, orphan)
			}
			var kept []string
			for _, k := range res.Kept {
				kept = append(kept, k.Block.String())
			}
			if !slices.Equal(slices.Sorted(maps.Keys(nonEmpty)), slices.Sorted(slices.Values(kept))) {
				t.Errorf("kept %v, want %v", kept, nonEmpty)
			}
			owners := checkConsistent(t, a, s)
			if owners[a1.IPs[0].Addr] != "a1" {
				t.Errorf("node-a's address lost: %v", owners)
			}
			blocks := blocksByCIDR(t, a, f.pool.Name)
			if _, ok := blocks[emptyBlock]; ok {
				t.Errorf("empty block %s of node-b still there", emptyBlock)
			}
			if b := blocks[a1.IPs[0].Block]; b.Node != "node-a" {
				t.Errorf("node-a's block: %+v", b)
			}
			// Once the kept blocks' addresses are released, a second call
			// frees them.
			for _, h := range hs {
				if _, err := a.Release(ctx, h.ID); err != nil {
					t.Fatal(err)
				}
			}
			if res, err = a.FreeNodeBlocks(ctx, "node-b"); err != nil || len(res.Freed) != len(nonEmpty) || len(res.Kept) != 0 {
				t.Fatalf("second FreeNodeBlocks = %+v, %v", res, err)
			}
			if nodes, _ := a.AffineNodes(ctx); nodes["node-b"] != 0 || nodes["node-a"] != 1 {
				t.Errorf("AffineNodes after = %v", nodes)
			}
			checkConsistent(t, a, s)
		})
	}
}

// TestFreeNodeBlocksRace: an allocation takes an address of the empty
// block between the read and the commit; the block is kept.
func TestFreeNodeBlocksRace(t *testing.T) {
	ctx := context.Background()
	for _, f := range nodeFamilies {
		t.Run(f.name, func(t *testing.T) {
			a0, s := setup(t, f.pool)
			h := allocate(t, a0, "node-b", "b1", set(f.pool.Name))
			if _, err := a0.Release(ctx, "b1"); err != nil {
				t.Fatal(err)
			}
			hs := &onceTxnStore{Store: s, key: allocator.BlockKey(f.pool.Name, h.IPs[0].Block)}
			a := newAllocator(t, hs)
			var late ipam.Handle
			hs.hook = func() { late = allocate(t, a0, "node-b", "late", set(f.pool.Name)) }
			res, err := a.FreeNodeBlocks(ctx, "node-b")
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Freed) != 0 || len(res.Kept) != 1 {
				t.Fatalf("FreeNodeBlocks = %+v, want the block kept", res)
			}
			if owners := checkConsistent(t, a, s); owners[late.IPs[0].Addr] != "late" {
				t.Fatalf("late allocation lost: %v", owners)
			}
		})
	}
}

func TestFreeNodeBlocksBadName(t *testing.T) {
	a, _ := setup(t)
	for _, n := range []string{"", "a/b"} {
		if _, err := a.FreeNodeBlocks(context.Background(), n); err == nil {
			t.Errorf("node %q accepted", n)
		}
	}
}
