package allocator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
)

// guardFams are the pools of the forged-hint tests: /26 and /122 blocks
// (64 addresses), with a gateway at ordinal 1 of the first block.
var guardFams = []struct {
	name string
	pool ipam.Pool
}{
	{"IPv4", ipam.Pool{Name: "p", CIDR: prefix("10.30.0.0/24"), BlockSize: 26, Gateway: addr("10.30.0.1")}},
	{"IPv6", ipam.Pool{Name: "p", CIDR: prefix("fd30::/120"), BlockSize: 122, Gateway: addr("fd30::1")}},
}

// forgery edits a node's hint the way a hostile edit of its hint file
// would: values change, every version stays. held is the ordinal of an
// address another handle holds.
type forgery struct {
	name  string
	forge func(t *testing.T, h *allocator.Hint, held int)
}

var forgeries = []forgery{
	{"held ordinal at the front of the free queue", func(t *testing.T, h *allocator.Hint, held int) {
		editBlock(t, h, func(b *ipam.Block) {
			delete(b.Owners, held) // a block that validates
			b.Free = append([]int{held}, b.Free...)
		})
	}},
	{"held ordinal at the front, owner kept", func(t *testing.T, h *allocator.Hint, held int) {
		editBlock(t, h, func(b *ipam.Block) { b.Free = append([]int{held}, b.Free[:len(b.Free)-1]...) })
	}},
	{"ordinal 64 in a 64-address block", func(t *testing.T, h *allocator.Hint, _ int) {
		editBlock(t, h, func(b *ipam.Block) { b.Free = append([]int{64}, b.Free[:len(b.Free)-1]...) })
	}},
	{"ordinal -1", func(t *testing.T, h *allocator.Hint, _ int) {
		editBlock(t, h, func(b *ipam.Block) { b.Free = append([]int{-1}, b.Free[:len(b.Free)-1]...) })
	}},
	{"ordinal 2^40", func(t *testing.T, h *allocator.Hint, _ int) {
		editBlock(t, h, func(b *ipam.Block) { b.Free = append([]int{1 << 40}, b.Free[:len(b.Free)-1]...) })
	}},
	// The gateway (ordinal 1) stays in the free queue, skipped because the
	// pool names it; a pool without it would hand it out.
	{"pool without its gateway", func(t *testing.T, h *allocator.Hint, _ int) {
		editEntry(t, h, allocator.PoolPrefix, func(raw []byte) []byte {
			var p ipam.Pool
			if err := json.Unmarshal(raw, &p); err != nil {
				t.Fatal(err)
			}
			p.Gateway = ipam.Pool{}.Gateway
			return allocator.Encode(p)
		})
	}},
}

// editEntry replaces the value of the one hint entry under prefix.
func editEntry(t *testing.T, h *allocator.Hint, prefix string, edit func([]byte) []byte) {
	t.Helper()
	n := 0
	for i, e := range h.Entries {
		if strings.HasPrefix(e.Key, prefix) {
			h.Entries[i].Value = edit(e.Value)
			n++
		}
	}
	if n != 1 {
		t.Fatalf("hint has %d entries under %s, want 1: %+v", n, prefix, h.Entries)
	}
}

func editBlock(t *testing.T, h *allocator.Hint, edit func(b *ipam.Block)) {
	t.Helper()
	editEntry(t, h, allocator.BlockPrefix, func(raw []byte) []byte {
		var b ipam.Block
		if err := json.Unmarshal(raw, &b); err != nil {
			t.Fatal(err)
		}
		edit(&b)
		return allocator.Encode(b)
	})
}

// TestForgedHints: an etcd allocation on a hint file edited to lie about
// a block or a pool (keeping every version, so only the content is false)
// never hands out an address another handle holds, one outside its block
// or the pool's gateway, and never writes the forged ordinals to the
// store: a hint may save reads, never decide. A real embedded etcd, file
// hints in a temp dir, a second allocator as the next plugin process.
func TestForgedHints(t *testing.T) {
	srv := etcdtest.ForTest(t, nil)
	ctx := context.Background()
	for fi, fam := range guardFams {
		for ci, tc := range forgeries {
			t.Run(fam.name+"/"+tc.name, func(t *testing.T) {
				st, err := etcd.Open(ctx, etcd.Config{Endpoints: []string{srv.Endpoint}, Prefix: fmt.Sprintf("/forged-%d-%d", fi, ci)})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { st.Close() })
				files := allocator.FileHints{Dir: t.TempDir()}
				first := newAllocator(t, st)
				first.SetHints(files)
				if _, err := first.EnsurePool(ctx, fam.pool); err != nil {
					t.Fatal(err)
				}
				var held []ipam.Handle
				for i := range 2 {
					h, err := first.Allocate(ctx, hintReq(fmt.Sprint("h", i), "n1", "p"))
					if err != nil {
						t.Fatal(err)
					}
					held = append(held, h)
				}
				hint, ok := files.Load("n1")
				if !ok {
					t.Fatal("no hint file after two allocations")
				}
				b := ipam.Block{CIDR: held[0].IPs[0].Block}
				ord, _ := b.Ordinal(held[0].IPs[0].Addr)
				tc.forge(t, &hint, ord)
				files.Store("n1", hint)

				next := newAllocator(t, st) // the next plugin process
				next.SetHints(files)
				got, err := next.Allocate(ctx, hintReq("h2", "n1", "p"))
				if err != nil {
					t.Fatal(err)
				}
				ip := got.IPs[0]
				for _, h := range held {
					if ip.Addr == h.IPs[0].Addr {
						t.Fatalf("forged hint handed out %s, held by %s", ip.Addr, h.ID)
					}
				}
				if !ip.Block.Contains(ip.Addr) || !fam.pool.Permits(ip.Addr) {
					t.Fatalf("forged hint handed out %s (block %s), which the pool does not permit", ip.Addr, ip.Block)
				}
				// Every stored block is valid (Blocks validates) and the
				// store is consistent.
				blocks, err := next.Blocks(ctx, "")
				if err != nil {
					t.Fatalf("a forged hint reached the store: %v", err)
				}
				for _, blk := range blocks {
					for _, o := range append(slices.Collect(maps.Keys(blk.Owners)), blk.Free...) {
						if o < 0 || o >= blk.Size() {
							t.Fatalf("ordinal %d written to block %s", o, blk.CIDR)
						}
					}
				}
				checkConsistent(t, next, st)
				mustCheckClean(t, st)
			})
		}
	}
}

// TestCorruptStoredBlockRefused: a block in the store whose free queue
// and owners do not partition it is refused by ADD and DEL (ErrCorrupt),
// which change nothing, instead of handing out an address twice or one
// outside the block; for IPv4 and IPv6.
func TestCorruptStoredBlockRefused(t *testing.T) {
	ctx := context.Background()
	for _, fam := range guardFams {
		for _, tc := range forgeries[1:5] { // the forgeries that break the block itself
			t.Run(fam.name+"/"+tc.name, func(t *testing.T) {
				a, s := setup(t, fam.pool)
				h0 := allocate(t, a, "n1", "h0", set("p"))
				key := allocator.BlockKey("p", h0.IPs[0].Block)
				es, err := s.Get(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				hint := allocator.Hint{Entries: es}
				b := ipam.Block{CIDR: h0.IPs[0].Block}
				ord, _ := b.Ordinal(h0.IPs[0].Addr)
				tc.forge(t, &hint, ord)
				if err := s.Txn(ctx, nil, []kv.Op{{Key: key, Value: hint.Entries[0].Value}}); err != nil {
					t.Fatal(err)
				}
				before := snapshot(t, s)
				fresh := newAllocator(t, s)
				if got, err := fresh.Allocate(ctx, request("n1", "h1", set("p"))); !errors.Is(err, allocator.ErrCorrupt) {
					t.Fatalf("ADD on a corrupt block = %+v, %v; want ErrCorrupt", got, err)
				}
				if freed, err := fresh.Release(ctx, "h0"); !errors.Is(err, allocator.ErrCorrupt) {
					t.Fatalf("DEL into a corrupt block = %v, %v; want ErrCorrupt", freed, err)
				}
				sameStore(t, "an operation on a corrupt block", before, s)
			})
		}
	}
}
