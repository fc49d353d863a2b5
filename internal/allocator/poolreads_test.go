package allocator_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
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
				first := newAllocator(t, s, v4Pool, v6Pool)
				for i := range nodes {
					if _, err := first.Allocate(t.Context(), podRequest(fmt.Sprint("node-", i), fmt.Sprint("warm", i), c.pool)); err != nil {
						t.Fatal(err)
					}
				}
				h := &herdStore{Store: s, want: nodes, hold: 300 * time.Millisecond, all: make(chan struct{})}
				a := allocator.New(h, nil)
				var wg sync.WaitGroup
				errs := make(chan error, nodes)
				for i := range nodes {
					wg.Go(func() {
						_, err := a.Allocate(t.Context(), podRequest(fmt.Sprint("node-", i), fmt.Sprint("c", i), c.pool))
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

// poolGets counts pool reads.
type poolGets struct {
	store.Store
	gets atomic.Int64
}

func (p *poolGets) GetPool(ctx context.Context, name string) (store.Pool, error) {
	p.gets.Add(1)
	return p.Store.GetPool(ctx, name)
}

// TestDefinedPoolReadsOnFirstADD: the first ADD of a config that defines
// a pool nobody created yet reads it missing once, creates it and reads it
// once more after claiming its block (pool removal's check); the next ADD
// reads no pool — the one it created serves it.
func TestDefinedPoolReadsOnFirstADD(t *testing.T) {
	for _, p := range []ipam.Pool{v4Pool, v6Pool} {
		t.Run(p.Name, func(t *testing.T) {
			storeBackends(t, func(t *testing.T, s store.Store) {
				pg := &poolGets{Store: s}
				a := allocator.New(pg, nil)
				add := func(id string) {
					t.Helper()
					req := podRequest("node-a", id, p.Name)
					req.Define = []ipam.Pool{p}
					if _, err := a.Allocate(t.Context(), req); err != nil {
						t.Fatal(err)
					}
				}
				add("c1")
				if n := pg.gets.Load(); n != 2 {
					t.Fatalf("the first ADD read the pool %d times, want 2 (missing, then after its claim)", n)
				}
				add("c2")
				if n := pg.gets.Load(); n != 2 {
					t.Fatalf("the second ADD read the pool %d times, want none", n-2)
				}
			})
		})
	}
}

// stallFirstPoolRead holds the first pool read until its context ends;
// later reads pass.
type stallFirstPoolRead struct {
	store.Store
	reads   atomic.Int64
	started chan struct{}
}

func (s *stallFirstPoolRead) GetPool(ctx context.Context, name string) (store.Pool, error) {
	if s.reads.Add(1) == 1 {
		close(s.started)
		<-ctx.Done()
		return store.Pool{}, ctx.Err()
	}
	return s.Store.GetPool(ctx, name)
}

// TestSharedPoolReadCancelled: when the allocation whose read of a pool
// others wait on is cancelled, a waiting allocation with a live context
// reads the pool itself and succeeds; the cancelled one fails with its
// context's error.
func TestSharedPoolReadCancelled(t *testing.T) {
	for _, p := range []ipam.Pool{v4Pool, v6Pool} {
		t.Run(p.Name, func(t *testing.T) {
			storeBackends(t, func(t *testing.T, s store.Store) {
				first := newAllocator(t, s, p)
				for _, n := range []string{"node-a", "node-b"} {
					if _, err := first.Allocate(t.Context(), podRequest(n, "warm-"+n, p.Name)); err != nil {
						t.Fatal(err)
					}
				}
				st := &stallFirstPoolRead{Store: s, started: make(chan struct{})}
				a := allocator.New(st, nil)
				ctx, cancel := context.WithCancel(t.Context())
				starter := make(chan error, 1)
				go func() {
					_, err := a.Allocate(ctx, podRequest("node-a", "c1", p.Name))
					starter <- err
				}()
				<-st.started
				waiter := make(chan error, 1)
				go func() {
					_, err := a.Allocate(t.Context(), podRequest("node-b", "c2", p.Name))
					waiter <- err
				}()
				time.Sleep(50 * time.Millisecond) // the waiter joins the stalled read
				cancel()
				if err := <-starter; !errors.Is(err, context.Canceled) {
					t.Fatalf("the cancelled allocation: %v, want context.Canceled", err)
				}
				if err := <-waiter; err != nil {
					t.Fatalf("the waiting allocation: %v, want its own read to succeed", err)
				}
			})
		})
	}
}
