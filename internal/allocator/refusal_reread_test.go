package allocator_test

import (
	"errors"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// TestRefusalRereadsPools: an allocation is refused for want of a usable
// pool (ErrNoPool, CNI 101) only on the pools as stored. A copy that says
// the pool is being removed or disabled — a node's hint file written
// before the removal was cancelled or the pool enabled again, or the
// allocator's cache — does not refuse: the pool is read and used. A pool
// stored as disabled still refuses. On the local store and etcd.
func TestRefusalRereadsPools(t *testing.T) {
	storeBackends(t, func(t *testing.T, s store.Store) {
		ctx := t.Context()
		a := newAllocator(t, s, v4Pool)
		stored, err := s.GetPool(ctx, v4Pool.Name)
		if err != nil {
			t.Fatal(err)
		}
		for i, stale := range []func(p *store.Pool){
			func(p *store.Pool) { p.Spec.Deleting = true },
			func(p *store.Pool) { p.Spec.Disabled = true },
		} {
			old := stored
			stale(&old)
			a.Remember(store.Node{}, []store.Pool{old})
			id := []string{"c-deleting", "c-disabled"}[i]
			if _, err := a.Allocate(ctx, podRequest("node-a", id, v4Pool.Name)); err != nil {
				t.Fatalf("allocation with a stale copy of the pool (%+v): %v; want the pool as stored used", old.Spec, err)
			}
		}
		stored.Spec.Disabled = true
		if _, err := s.UpdatePool(ctx, stored); err != nil {
			t.Fatal(err)
		}
		// A new allocator: this one's cache serves the pool as read above
		// for PoolCacheTTL.
		if _, err := newAllocator(t, s).Allocate(ctx, podRequest("node-a", "c-refused", v4Pool.Name)); !errors.Is(err, allocator.ErrNoPool) {
			t.Fatalf("allocation from a pool stored as disabled: %v, want ErrNoPool", err)
		}
	})
}
