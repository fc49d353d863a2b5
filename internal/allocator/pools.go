package allocator

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
)

// EnsurePool creates pool if it does not exist and returns the stored
// pool. An existing pool with the same definition is returned as is; one
// created by an import takes the given definition (its first config); any
// other difference fails with ErrPoolConflict, changing nothing.
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
// import adopts def; any other difference is ErrPoolConflict.
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
				ErrPoolConflict, def.Name, describe(stored), describe(def), def.Name)
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

// CreatePool stores a new pool; it fails with ErrPoolConflict when a pool
// of that name exists.
func (a *Allocator) CreatePool(ctx context.Context, pool ipam.Pool) error {
	if err := pool.Validate(); err != nil {
		return err
	}
	err := a.store.Txn(ctx, []kv.Cond{{Key: PoolKey(pool.Name), Version: 0}},
		[]kv.Op{{Key: PoolKey(pool.Name), Value: Encode(pool)}})
	if err != nil && isConflict(err) {
		return fmt.Errorf("%w: pool %q already exists", ErrPoolConflict, pool.Name)
	}
	return err
}

// DeletePool removes a pool with its (empty) blocks and their affinities,
// in as many transactions as the store's limits (kv.Limits) require, each
// safe on its own. It refuses with ErrPoolInUse while any address is
// allocated, saying how many, and changes nothing then.
//
// It first marks the pool Deleting, which fails every allocation that read
// the pool before (allocations are guarded by the pool's version) and stops
// new ones, so that the blocks it then lists are all there are and stay
// empty. It deletes them in batches, each guarded by the blocks' versions
// and the marked pool's, and deletes the pool key last. Should it find an
// address in use after all (an allocation that committed just before the
// mark), it clears the mark and refuses: the pool stays usable.
//
// A removal that is interrupted (an error, a crash) leaves the pool marked
// and maybe some of its empty blocks gone, which is consistent: the pool
// hands out nothing, and the next DeletePool finishes the removal, or
// CancelPoolRemoval keeps the pool.
func (a *Allocator) DeletePool(ctx context.Context, name string) error {
	err := a.retry(ctx, "delete pool "+name, func() error { return a.markDeleting(ctx, name) })
	if err != nil {
		return err
	}
	return a.retry(ctx, "delete pool "+name, func() error { return a.removeMarked(ctx, name) })
}

// markDeleting marks the pool Deleting unless it is already (an earlier
// removal that was interrupted); it refuses without writing anything when
// addresses are in use.
func (a *Allocator) markDeleting(ctx context.Context, name string) error {
	es, err := a.store.Get(ctx, PoolKey(name))
	if err != nil {
		return err
	}
	e := es[0]
	if e.Version == 0 {
		return fmt.Errorf("%w: %q", ErrPoolNotFound, name)
	}
	pool, err := decode[ipam.Pool](e)
	if err != nil || pool.Deleting {
		return err
	}
	if err := a.refuseInUse(ctx, name); err != nil {
		return err
	}
	pool.Deleting = true
	return a.store.Txn(ctx, []kv.Cond{{Key: e.Key, Version: e.Version}}, []kv.Op{{Key: e.Key, Value: Encode(pool)}})
}

// removeMarked deletes a pool marked Deleting: its empty blocks with their
// affinities in batches the store accepts, then the pool key. A conflict
// (another pool rm of the same pool, a release) is retried by the caller
// from a fresh read, which finds what is left.
func (a *Allocator) removeMarked(ctx context.Context, name string) error {
	es, err := a.store.Get(ctx, PoolKey(name))
	if err != nil {
		return err
	}
	e := es[0]
	if e.Version == 0 {
		return nil // another pool rm finished it
	}
	pool, err := decode[ipam.Pool](e)
	if err != nil {
		return err
	}
	if !pool.Deleting {
		return fmt.Errorf("%w: the removal of pool %q was cancelled meanwhile ('ipkeeperctl pool rm --cancel'); it stays", ErrPoolConflict, name)
	}
	entries, err := a.store.List(ctx, BlockPrefix+name+"/")
	if err != nil {
		return err
	}
	poolCond := kv.Cond{Key: e.Key, Version: e.Version}
	inUse := 0
	type blockOps struct {
		cond kv.Cond
		ops  []kv.Op
	}
	var blocks []blockOps
	for _, be := range entries {
		b, err := decode[ipam.Block](be)
		if err != nil {
			return err
		}
		inUse += b.InUse()
		bo := blockOps{cond: kv.Cond{Key: be.Key, Version: be.Version}, ops: []kv.Op{{Key: be.Key, Delete: true}}}
		if b.Node != "" {
			bo.ops = append(bo.ops, kv.Op{Key: AffinityKey(b.Node, name, b.CIDR), Delete: true})
		}
		blocks = append(blocks, bo)
	}
	if inUse > 0 {
		pool.Deleting = false
		if err := a.store.Txn(ctx, []kv.Cond{poolCond}, []kv.Op{{Key: e.Key, Value: Encode(pool)}}); err != nil {
			return err
		}
		return fmt.Errorf("%w: pool %q has %d addresses in use; it stays usable, release them first", ErrPoolInUse, name, inUse)
	}
	limits := kv.LimitsOf(a.store)
	if limits.MaxOps <= 0 {
		limits.MaxOps = maxRemovalOps
	}
	conds := []kv.Cond{poolCond}
	var ops []kv.Op
	for _, bo := range blocks {
		if !limits.Fits(append(conds[:len(conds):len(conds)], bo.cond), append(ops[:len(ops):len(ops)], bo.ops...)) && len(ops) > 0 {
			if err := a.store.Txn(ctx, conds, ops); err != nil {
				return err
			}
			conds, ops = conds[:1], nil
		}
		conds = append(conds, bo.cond)
		ops = append(ops, bo.ops...)
	}
	// The pool key goes last, with the last batch when it fits: a removal
	// that stops before leaves a marked pool whose remaining blocks the
	// next DeletePool finds.
	last := kv.Op{Key: e.Key, Delete: true}
	if !limits.Fits(conds, append(ops[:len(ops):len(ops)], last)) {
		if err := a.store.Txn(ctx, conds, ops); err != nil {
			return err
		}
		conds, ops = conds[:1], nil
	}
	return a.store.Txn(ctx, conds, append(ops, last))
}

// maxRemovalOps bounds the operations of one pool-removal transaction on a
// store without an operation limit, so that no transaction grows with the
// pool.
const maxRemovalOps = 1024

// CancelPoolRemoval keeps a pool that an interrupted DeletePool left
// marked Deleting: it clears the mark, so the pool hands out addresses
// again (blocks the removal already deleted are claimed anew when needed).
// It reports whether the pool was marked; a pool that is not is left as
// is.
func (a *Allocator) CancelPoolRemoval(ctx context.Context, name string) (bool, error) {
	var was bool
	err := a.retry(ctx, "keep pool "+name, func() error {
		es, err := a.store.Get(ctx, PoolKey(name))
		if err != nil {
			return err
		}
		e := es[0]
		if e.Version == 0 {
			return fmt.Errorf("%w: %q", ErrPoolNotFound, name)
		}
		pool, err := decode[ipam.Pool](e)
		if err != nil {
			return err
		}
		if was = pool.Deleting; !was {
			return nil
		}
		pool.Deleting = false
		return a.store.Txn(ctx, []kv.Cond{{Key: e.Key, Version: e.Version}}, []kv.Op{{Key: e.Key, Value: Encode(pool)}})
	})
	return was, err
}

// RemovalAdvice says that pool is being removed and how to finish or
// cancel that, for errors of allocations that find it marked Deleting.
func RemovalAdvice(pool string) string {
	return fmt.Sprintf("pool %q is being removed (an 'ipkeeperctl pool rm' is running or was interrupted): run 'ipkeeperctl pool rm %s' to finish removing it, or 'ipkeeperctl pool rm --cancel %s' to keep it",
		pool, pool, pool)
}

// refuseInUse fails with ErrPoolInUse when the pool's blocks hold addresses.
func (a *Allocator) refuseInUse(ctx context.Context, name string) error {
	blocks, err := a.Blocks(ctx, name)
	if err != nil {
		return err
	}
	inUse := 0
	for _, b := range blocks {
		inUse += b.InUse()
	}
	if inUse > 0 {
		return fmt.Errorf("%w: pool %q has %d addresses in use; release them first", ErrPoolInUse, name, inUse)
	}
	return nil
}

// Pool returns one pool.
func (a *Allocator) Pool(ctx context.Context, name string) (ipam.Pool, error) {
	es, err := a.store.Get(ctx, PoolKey(name))
	if err != nil {
		return ipam.Pool{}, err
	}
	if es[0].Version == 0 {
		return ipam.Pool{}, fmt.Errorf("%w: %q", ErrPoolNotFound, name)
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
	return ipam.Pool{}, fmt.Errorf("%w: no pool holds %s", ErrPoolNotFound, addr)
}
