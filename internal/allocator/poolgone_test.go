package allocator_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// poolRemover is a real store on which another process deletes a pool
// just before the first UpdatePool of it.
type poolRemover struct {
	store.Store
	once sync.Once
}

func (r *poolRemover) UpdatePool(ctx context.Context, p store.Pool) (store.Pool, error) {
	r.once.Do(func() {
		if cur, err := r.Store.GetPool(ctx, p.Spec.Name); err == nil {
			_ = r.Store.DeletePool(ctx, cur)
		}
	})
	return r.Store.UpdatePool(ctx, p)
}

// TestPoolWriteOfDeletedPool: a pool deleted between a read and the write
// that follows it makes the operation read it again, on every backend:
// CancelPoolRemoval then reports ErrPoolNotFound, not the store's
// not-found error of its write.
func TestPoolWriteOfDeletedPool(t *testing.T) {
	storeBackends(t, func(t *testing.T, s store.Store) {
		ctx := t.Context()
		newAllocator(t, s, v4Pool)
		p, err := s.GetPool(ctx, v4Pool.Name)
		if err != nil {
			t.Fatal(err)
		}
		p.Spec.Deleting = true
		if _, err := s.UpdatePool(ctx, p); err != nil {
			t.Fatal(err)
		}
		_, err = allocator.New(&poolRemover{Store: s}, nil).CancelPoolRemoval(ctx, v4Pool.Name)
		if !errors.Is(err, allocator.ErrPoolNotFound) {
			t.Fatalf("CancelPoolRemoval of a pool deleted before its write: %v, want ErrPoolNotFound", err)
		}
	})
}
