package allocator

import (
	"context"
	"errors"
	"fmt"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// SetPoolSticky sets the pool's Sticky flag (ipam.Pool.Sticky) and
// returns the pool as stored; ErrPoolNotFound when there is none.
func (a *Allocator) SetPoolSticky(ctx context.Context, name string, on bool) (ipam.Pool, error) {
	var out ipam.Pool
	err := a.retry(ctx, "set pool "+name, func() error {
		p, err := a.store.GetPool(ctx, name)
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("%w: %q", ErrPoolNotFound, name)
		}
		if err != nil {
			return err
		}
		if p.Spec.Sticky == on {
			out = p.Spec
			return nil
		}
		p.Spec.Sticky = on
		stored, err := a.updatePool(ctx, p)
		out = stored.Spec
		return err
	})
	if err != nil {
		return ipam.Pool{}, err
	}
	a.cachePool(out)
	return out, nil
}

// PoolsSticky reports whether a pool the request draws from is sticky
// (ipam.Pool.Sticky): its handle then keeps its addresses for its
// identity. It reads the pools as the allocation does (cached).
func (a *Allocator) PoolsSticky(ctx context.Context, req Request) (bool, error) {
	pools, err := a.requestPools(ctx, req)
	if err != nil {
		return false, err
	}
	for _, p := range pools {
		if p.Sticky {
			return true, nil
		}
	}
	return false, nil
}
