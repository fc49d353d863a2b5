package etcdfault

import (
	"context"
	"fmt"
	"sync"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// faultStore is a real typed store that counts its writes (every create,
// update and delete of a pool, claim or node object), can run a hook
// before a write, and can fail one write without applying it (as a
// connection lost before the request left).
type faultStore struct {
	store.Store
	mu     sync.Mutex
	writes int
	// failAt fails the failAt-th write (1-based, counted from the last
	// reset); 0 never.
	failAt int
	// before runs before the n-th write.
	before func(n int)
}

func (f *faultStore) reset(failAt int, before func(int)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writes, f.failAt, f.before = 0, failAt, before
}

func (f *faultStore) writeCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writes
}

// write runs before the write what and reports the injected failure.
func (f *faultStore) write(what string) error {
	f.mu.Lock()
	f.writes++
	n, fail, before := f.writes, f.failAt == f.writes, f.before
	f.mu.Unlock()
	if before != nil {
		before(n)
	}
	if fail {
		return fmt.Errorf("%w: injected failure of write %d (%s)", store.ErrUnavailable, n, what)
	}
	return nil
}

func (f *faultStore) CreatePool(ctx context.Context, p store.Pool) (store.Pool, error) {
	if err := f.write("create pool " + p.Spec.Name); err != nil {
		return store.Pool{}, err
	}
	return f.Store.CreatePool(ctx, p)
}

func (f *faultStore) UpdatePool(ctx context.Context, p store.Pool) (store.Pool, error) {
	if err := f.write("update pool " + p.Spec.Name); err != nil {
		return store.Pool{}, err
	}
	return f.Store.UpdatePool(ctx, p)
}

func (f *faultStore) DeletePool(ctx context.Context, p store.Pool) error {
	if err := f.write("delete pool " + p.Spec.Name); err != nil {
		return err
	}
	return f.Store.DeletePool(ctx, p)
}

func (f *faultStore) CreateClaim(ctx context.Context, c store.Claim) (store.Claim, error) {
	if err := f.write("create claim " + c.CIDR.String()); err != nil {
		return store.Claim{}, err
	}
	return f.Store.CreateClaim(ctx, c)
}

func (f *faultStore) DeleteClaim(ctx context.Context, c store.Claim) error {
	if err := f.write("delete claim " + c.CIDR.String()); err != nil {
		return err
	}
	return f.Store.DeleteClaim(ctx, c)
}

func (f *faultStore) CreateNode(ctx context.Context, n store.Node) (store.Node, error) {
	if err := f.write("create node " + n.Name); err != nil {
		return store.Node{}, err
	}
	return f.Store.CreateNode(ctx, n)
}

func (f *faultStore) UpdateNode(ctx context.Context, n store.Node) (store.Node, error) {
	if err := f.write("update node " + n.Name); err != nil {
		return store.Node{}, err
	}
	return f.Store.UpdateNode(ctx, n)
}

func (f *faultStore) DeleteNode(ctx context.Context, n store.Node) error {
	if err := f.write("delete node " + n.Name); err != nil {
		return err
	}
	return f.Store.DeleteNode(ctx, n)
}
