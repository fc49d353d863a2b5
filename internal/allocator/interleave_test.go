package allocator_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/kv"
)

// hookStore is a real store that runs a hook once, right before the next
// transaction that writes, to put another operation between an operation's
// reads and its commit.
type hookStore struct {
	kv.Store
	mu   sync.Mutex
	hook func()
}

func (h *hookStore) beforeNextWrite(fn func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hook = fn
}

func (h *hookStore) Txn(ctx context.Context, conds []kv.Cond, ops []kv.Op) error {
	h.mu.Lock()
	fn := h.hook
	if len(ops) > 0 {
		h.hook = nil
	} else {
		fn = nil
	}
	h.mu.Unlock()
	if fn != nil {
		fn()
	}
	return h.Store.Txn(ctx, conds, ops)
}

// TestDeletePoolRacesAllocate puts a DeletePool between an Allocate's
// reads and its commit, and an Allocate between a DeletePool's reads and
// its commit. Either way no allocation may survive in a deleted pool.
func TestDeletePoolRacesAllocate(t *testing.T) {
	forFams(t, func(t *testing.T, f fam) {
		for _, existing := range []bool{false, true} {
			name := "new block"
			if existing {
				name = "existing empty block"
			}
			t.Run(name, func(t *testing.T) { testDeletePoolRace(t, f, existing) })
		}
	})
}

func testDeletePoolRace(t *testing.T, f fam, existing bool) {
	ctx := context.Background()
	// prepare leaves the pool empty, with a block claimed by node n when
	// existing is set.
	prepare := func(a *allocator.Allocator) {
		t.Helper()
		if _, err := a.EnsurePool(ctx, f.pool("p", 4)); err != nil {
			t.Fatal(err)
		}
		if existing {
			allocate(t, a, "n", "tmp", set("p"))
			if _, err := a.Release(ctx, "tmp"); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Run("delete commits first", func(t *testing.T) {
		s := openStore(t)
		hs := &hookStore{Store: s}
		racer := newAllocator(t, hs)
		other := newAllocator(t, s)
		prepare(other)
		var delErr error
		hs.beforeNextWrite(func() { delErr = other.DeletePool(ctx, "p") })
		h, err := racer.Allocate(ctx, request("n", "h", set("p")))
		if delErr != nil {
			t.Fatalf("DeletePool of an empty pool: %v", delErr)
		}
		if !errors.Is(err, allocator.ErrPoolNotFound) {
			t.Errorf("Allocate racing DeletePool = %+v, %v, want ErrPoolNotFound", h, err)
		}
		if ks := keys(t, s, ""); len(ks) > 0 {
			t.Errorf("left in the store: %v", ks)
		}
	})
	t.Run("allocate commits first", func(t *testing.T) {
		s := openStore(t)
		hs := &hookStore{Store: s}
		racer := newAllocator(t, hs)
		other := newAllocator(t, s)
		prepare(other)
		var allocErr error
		hs.beforeNextWrite(func() { _, allocErr = other.Allocate(ctx, request("n", "h", set("p"))) })
		err := racer.DeletePool(ctx, "p")
		if allocErr != nil {
			t.Fatalf("Allocate: %v", allocErr)
		}
		if !errors.Is(err, allocator.ErrPoolInUse) {
			t.Errorf("DeletePool racing Allocate = %v, want ErrPoolInUse", err)
		}
		if _, err := other.Pool(ctx, "p"); err != nil {
			t.Errorf("pool with a live allocation was deleted: %v", err)
		}
		checkConsistent(t, other, s)
	})
}
