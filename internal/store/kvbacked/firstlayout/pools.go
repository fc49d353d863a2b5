package firstlayout

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
)

// EnsurePool creates pool if it does not exist and returns the stored
// pool. An existing pool with the same definition is returned as is; one
// created by an import takes the given definition (its first config); any
// other difference fails with allocator.ErrPoolConflict, changing nothing.
func (a *Allocator) EnsurePool(ctx context.Context, pool ipam.Pool) (ipam.Pool, error) {
	if err := pool.Validate(); err != nil {
		return ipam.Pool{}, err
	}
	var out ipam.Pool
	err := a.retry(ctx, "ensure pool "+pool.Name, func() error {
		es, err := a.store.Get(ctx, PoolKey(pool.Name))
		if err != nil {
			return err
		}
		var put *kv.Op
		if out, put, err = reconcilePool(es[0], pool); err != nil || put == nil {
			return err
		}
		return a.store.Txn(ctx, []kv.Cond{{Key: es[0].Key, Version: es[0].Version}}, []kv.Op{*put})
	})
	return out, err
}

// reconcilePool decides what a stored pool entry becomes when a config
// defines the pool as def: the pool to use, and the write needed (nil when
// the stored pool is used as is). An absent pool is created; one from an
// import adopts def; any other difference is allocator.ErrPoolConflict.
func reconcilePool(e kv.KeyValue, def ipam.Pool) (ipam.Pool, *kv.Op, error) {
	if e.Version != 0 {
		stored, err := decode[ipam.Pool](e)
		if err != nil {
			return ipam.Pool{}, nil, err
		}
		switch {
		case stored.SameDefinition(def):
			return stored, nil, nil
		case stored.Origin != "import" || stored.CIDR != def.CIDR || stored.BlockSize != def.BlockSize:
			return ipam.Pool{}, nil, fmt.Errorf("%w: pool %q is stored as %s, the config asks for %s; remove it with 'ipkeeperctl pool rm %s' once it is empty, or use another range",
				allocator.ErrPoolConflict, def.Name, describe(stored), describe(def), def.Name)
		}
	}
	return def, &kv.Op{Key: e.Key, Value: Encode(def)}, nil
}

func describe(p ipam.Pool) string {
	s := fmt.Sprintf("%s blocks /%d", p.CIDR, p.BlockSize)
	if p.RangeStart.IsValid() || p.RangeEnd.IsValid() {
		s += fmt.Sprintf(" range %v-%v", p.RangeStart, p.RangeEnd)
	}
	if p.Gateway.IsValid() {
		s += " gateway " + p.Gateway.String()
	}
	if len(p.Exclude) > 0 {
		s += fmt.Sprintf(" exclude %v", p.Exclude)
	}
	return s
}

// CreatePool stores a new pool; it fails with allocator.ErrPoolConflict when a pool
// of that name exists.
func (a *Allocator) CreatePool(ctx context.Context, pool ipam.Pool) error {
	if err := pool.Validate(); err != nil {
		return err
	}
	err := a.store.Txn(ctx, []kv.Cond{{Key: PoolKey(pool.Name), Version: 0}},
		[]kv.Op{{Key: PoolKey(pool.Name), Value: Encode(pool)}})
	if err != nil && isConflict(err) {
		return fmt.Errorf("%w: pool %q already exists", allocator.ErrPoolConflict, pool.Name)
	}
	return err
}

// Pool returns one pool.
func (a *Allocator) Pool(ctx context.Context, name string) (ipam.Pool, error) {
	es, err := a.store.Get(ctx, PoolKey(name))
	if err != nil {
		return ipam.Pool{}, err
	}
	if es[0].Version == 0 {
		return ipam.Pool{}, fmt.Errorf("%w: %q", allocator.ErrPoolNotFound, name)
	}
	return decode[ipam.Pool](es[0])
}

// Pools returns every pool, sorted by name.
func (a *Allocator) Pools(ctx context.Context) ([]ipam.Pool, error) {
	return listDecoded[ipam.Pool](ctx, a.store, PoolPrefix)
}

// poolOf finds the pool whose CIDR holds addr.
func (a *Allocator) poolOf(ctx context.Context, addr netip.Addr) (ipam.Pool, error) {
	pools, err := a.Pools(ctx)
	if err != nil {
		return ipam.Pool{}, err
	}
	for _, p := range pools {
		if p.CIDR.Contains(addr) {
			return p, nil
		}
	}
	return ipam.Pool{}, fmt.Errorf("%w: no pool holds %s", allocator.ErrPoolNotFound, addr)
}
