package allocator_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// herdStore holds each pool read until want reads wait together, or for
// at most hold.
type herdStore struct {
	store.Store
	want    int64
	hold    time.Duration
	reads   atomic.Int64
	mu      sync.Mutex
	waiting int64
	all     chan struct{}
}

func (h *herdStore) GetPool(ctx context.Context, name string) (store.Pool, error) {
	h.reads.Add(1)
	h.mu.Lock()
	if h.waiting++; h.waiting == h.want {
		close(h.all)
	}
	h.mu.Unlock()
	select {
	case <-h.all:
	case <-time.After(h.hold):
	}
	return h.Store.GetPool(ctx, name)
}

// TestConcurrentAllocationsReadAPoolOnce: allocations on nodes that
// already hold blocks, started together on an allocator that has not read
// their pool yet (the agent on a new partition, a node's first pods at
// boot), read the pool once between them, not once each.
func TestConcurrentAllocationsReadAPoolOnce(t *testing.T) {
	const nodes = 8
	for _, c := range []struct {
		name string
		pool string
	}{{"IPv4", v4Pool.Name}, {"IPv6", v6Pool.Name}} {
		t.Run(c.name, func(t *testing.T) {
			storeBackends(t, func(t *testing.T, s store.Store) {
				first := newStoreAllocator(t, s, v4Pool, v6Pool)
				for i := range nodes {
					if _, err := first.Allocate(t.Context(), storeReq(fmt.Sprint("node-", i), fmt.Sprint("warm", i), c.pool)); err != nil {
						t.Fatal(err)
					}
				}
				h := &herdStore{Store: s, want: nodes, hold: 300 * time.Millisecond, all: make(chan struct{})}
				a := allocator.NewStoreAllocator(h, nil)
				var wg sync.WaitGroup
				errs := make(chan error, nodes)
				for i := range nodes {
					wg.Go(func() {
						_, err := a.Allocate(t.Context(), storeReq(fmt.Sprint("node-", i), fmt.Sprint("c", i), c.pool))
						errs <- err
					})
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					if err != nil {
						t.Fatal(err)
					}
				}
				if n := h.reads.Load(); n != 1 {
					t.Fatalf("%d allocations started together read their pool %d times, want once", nodes, n)
				}
			})
		})
	}
}
