package consistency

import (
	"context"
	"sync/atomic"
	"testing"

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
// allocation survives.
func TestRepairReplansAfterConcurrentWrite(t *testing.T) {
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			fx := newFixture(t, f)
			var first int
			edit(fx, fx.blockKey("net.a0.eth0"), func(b *ipam.Block) {
				for _, o := range b.Free {
					if fx.pool.Permits(b.Addr(o)) {
						first = o
						break
					}
				}
				b.Free = append(b.Free, first)
			})
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
			if b.Addr(first) != raced.IPs[0].Addr {
				t.Fatalf("test setup: raced allocation got %s, want the duplicated %s", raced.IPs[0].Addr, b.Addr(first))
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
