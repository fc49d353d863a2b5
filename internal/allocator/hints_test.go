package allocator_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
)

// countingStore counts reads and transactions, to tell a hint-only
// allocation (no read) from one that read the store.
type countingStore struct {
	kv.Store
	reads, txns int
}

func (c *countingStore) Get(ctx context.Context, keys ...string) ([]kv.KeyValue, error) {
	c.reads++
	return c.Store.Get(ctx, keys...)
}

func (c *countingStore) List(ctx context.Context, prefix string) ([]kv.KeyValue, error) {
	c.reads++
	return c.Store.List(ctx, prefix)
}

func (c *countingStore) Txn(ctx context.Context, conds []kv.Cond, ops []kv.Op) error {
	c.txns++
	return c.Store.Txn(ctx, conds, ops)
}

func (c *countingStore) TxnRevision(ctx context.Context, conds []kv.Cond, ops []kv.Op) (int64, error) {
	c.txns++
	return kv.TxnRevision(ctx, c.Store, conds, ops)
}

func hintReq(id, node string, pool string) allocator.Request {
	return allocator.Request{Handle: ipam.Handle{ID: id, Node: node}, Sets: [][]string{{pool}}}
}

// TestHints checks, for IPv4 and IPv6, that a warm hint saves every read,
// and that a hint made stale by another allocator (another node's
// plugin, ipkeeperctl) never yields a wrong result: a conflicting commit is
// redone with reads, a block the hint says is full is re-read before a new
// block is claimed, and a repeated ADD still returns the stored handle.
func TestHints(t *testing.T) {
	for _, fam := range []struct {
		name string
		pool ipam.Pool
	}{
		{"IPv4", ipam.Pool{Name: "p", CIDR: prefix("10.9.0.0/24"), BlockSize: 29}},
		{"IPv6", ipam.Pool{Name: "p", CIDR: prefix("fd09::/120"), BlockSize: 125}},
	} {
		t.Run(fam.name, func(t *testing.T) {
			ctx := context.Background()
			s := openStore(t)
			cs := &countingStore{Store: s}
			a := newAllocator(t, cs)
			other := newAllocator(t, s) // another process, same store
			if _, err := a.EnsurePool(ctx, fam.pool); err != nil {
				t.Fatal(err)
			}
			first, err := a.Allocate(ctx, hintReq("h0", "n1", "p"))
			if err != nil {
				t.Fatal(err)
			}
			// Warm hint: one transaction, no read.
			cs.reads, cs.txns = 0, 0
			if _, err := a.Allocate(ctx, hintReq("h1", "n1", "p")); err != nil {
				t.Fatal(err)
			}
			if cs.reads != 0 || cs.txns != 1 {
				t.Fatalf("warm allocation did %d reads and %d transactions, want 0 and 1", cs.reads, cs.txns)
			}
			// Another allocator takes the next address of n1's block: a's
			// hint is stale, its hint-only commit fails and is redone.
			stolen, err := other.Allocate(ctx, hintReq("x1", "n1", "p"))
			if err != nil {
				t.Fatal(err)
			}
			got, err := a.Allocate(ctx, hintReq("h2", "n1", "p"))
			if err != nil {
				t.Fatal(err)
			}
			if got.IPs[0].Addr == stolen.IPs[0].Addr {
				t.Fatalf("stale hint handed out %s twice", got.IPs[0].Addr)
			}
			// A repeated ADD returns the stored handle, hint or not.
			again, err := a.Allocate(ctx, hintReq("h0", "n1", "p"))
			if err != nil || again.IPs[0].Addr != first.IPs[0].Addr {
				t.Fatalf("repeated ADD = %v, %v; want %s", again.IPs, err, first.IPs[0].Addr)
			}
			// Fill n1's block through a, so a's hint says it is full.
			var last ipam.Handle
			for i := 3; ; i++ {
				if size := (ipam.Block{CIDR: fam.pool.BlockAt(0)}).Size(); i > 3+size {
					// Stop instead of looping until the test times out.
					t.Fatalf("%d allocations and the first block (%d addresses) still has room", i, size)
				}
				blocks, err := a.Blocks(ctx, "p")
				if err != nil {
					t.Fatal(err)
				}
				if len(blocks) != 1 {
					t.Fatalf("%d blocks while filling the first", len(blocks))
				}
				if blocks[0].FreeCount(fam.pool) == 0 {
					break
				}
				if last, err = a.Allocate(ctx, hintReq(fmt.Sprintf("h%d", i), "n1", "p")); err != nil {
					t.Fatal(err)
				}
			}
			blocksBefore, err := a.Blocks(ctx, "p")
			if err != nil {
				t.Fatal(err)
			}
			// The other allocator frees an address in the first block.
			if _, err := other.ReleaseAddr(ctx, last.IPs[0].Addr); err != nil {
				t.Fatal(err)
			}
			reused, err := a.Allocate(ctx, hintReq("reuse", "n1", "p"))
			if err != nil {
				t.Fatal(err)
			}
			if reused.IPs[0].Block != first.IPs[0].Block {
				t.Fatalf("with room in its first block (freed by another allocator) n1 got %s from %s", reused.IPs[0].Addr, reused.IPs[0].Block)
			}
			blocksAfter, _ := a.Blocks(ctx, "p")
			if len(blocksAfter) != len(blocksBefore) {
				t.Fatalf("a stale full hint made n1 claim another block: %d blocks, were %d", len(blocksAfter), len(blocksBefore))
			}
			checkConsistent(t, other, s)
		})
	}
}

// TestFileHints checks the file-backed hints: they survive the process
// (a new FileHints on the same dir), and a torn or foreign file is no hint.
func TestFileHints(t *testing.T) {
	dir := t.TempDir()
	h := allocator.Hint{Entries: []kv.KeyValue{{Key: "blocks/p/10.0.0.0-26", Value: []byte(`{"x":1}`), Version: 7}}}
	allocator.FileHints{Dir: dir}.Store("node-a", h)
	got, ok := allocator.FileHints{Dir: dir}.Load("node-a")
	if !ok || len(got.Entries) != 1 || got.Entries[0].Version != 7 || string(got.Entries[0].Value) != `{"x":1}` {
		t.Fatalf("Load = %+v, %v", got, ok)
	}
	if _, ok := (allocator.FileHints{Dir: dir}).Load("node-b"); ok {
		t.Fatal("hint for a node never stored")
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, f := range files {
		if err := os.WriteFile(f, []byte(`{"entries":[{"Key":`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := (allocator.FileHints{Dir: dir}).Load("node-a"); ok {
		t.Fatal("a torn hint file was taken as a hint")
	}
	allocator.FileHints{Dir: dir}.Forget("node-a")
	if _, ok := (allocator.FileHints{Dir: dir}).Load("node-a"); ok {
		t.Fatal("Forget left the hint")
	}
}
