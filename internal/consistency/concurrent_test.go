package consistency

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
)

// racingStore runs before() ahead of the first transaction passed through
// it: a writer that gets in between Repair's read and its commit.
type racingStore struct {
	kv.Store
	before func()
	calls  atomic.Int32
}

func (s *racingStore) Txn(ctx context.Context, conds []kv.Cond, ops []kv.Op) error {
	if s.calls.Add(1) == 1 {
		s.before()
	}
	return s.Store.Txn(ctx, conds, ops)
}

// TestRepairReplansAfterConcurrentWrite: an allocation that commits
// between Repair's snapshot and its fix makes the fix fail its
// compare-and-swap; Repair re-reads, repairs what is then true, and the
// allocation survives. (The corruption is one the allocator still
// allocates beside: a handle record deleted; a block whose free queue is
// broken is refused by the allocator, not allocated from.)
func TestRepairReplansAfterConcurrentWrite(t *testing.T) {
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			fx := newFixture(t, f)
			fx.del(allocator.HandleKey("net.a0.eth0"))
			var raced ipam.Handle
			rs := &racingStore{Store: fx.store, before: func() { raced = fx.allocate("net.race.eth0", "node-a") }}
			res, err := Repair(fx.ctx, rs)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Remaining) != 0 {
				t.Fatalf("remaining after repair: %+v", res.Remaining)
			}
			if rs.calls.Load() < 2 {
				t.Fatalf("repair committed %d transactions; the first must have conflicted and been retried", rs.calls.Load())
			}
			_, b, err := fx.alloc.Block(fx.ctx, raced.IPs[0].Block)
			if err != nil || b.Owner(raced.IPs[0].Addr) != "net.race.eth0" {
				t.Fatalf("concurrent allocation lost: owner %q, %v", b.Owner(raced.IPs[0].Addr), err)
			}
			if raced.IPs[0].Block != fx.ip("net.a0.eth0").Block {
				t.Fatalf("test setup: raced allocation went to block %s, not the repaired %s", raced.IPs[0].Block, fx.ip("net.a0.eth0").Block)
			}
			if h, ok, err := fx.alloc.Handle(fx.ctx, "net.a0.eth0"); err != nil || !ok || h.IPs[0].Addr != fx.ip("net.a0.eth0").Addr {
				t.Fatalf("handle net.a0.eth0 after repair = %+v, %v, %v", h, ok, err)
			}
			if r := fx.check(); len(r.Problems) != 0 {
				t.Fatalf("check after repair: %+v", r.Problems)
			}
		})
	}
}

func TestCheckCounts(t *testing.T) {
	fx := newFixture(t, families[0])
	got := fx.check().Counts
	want := Counts{Pools: 1, Blocks: 2, Handles: 4, Affinities: 2, Allocated: 4}
	if got != want {
		t.Fatalf("counts = %+v, want %+v", got, want)
	}
}
