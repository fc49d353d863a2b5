package allocator

import (
	"context"
	"errors"
	"fmt"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/nodealloc"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// EnsurePool creates pool if it does not exist and returns the stored
// pool. An existing pool with the same definition is returned as is; one
// created by an import takes the given definition (its first config); any
// other difference fails with ErrPoolConflict, changing nothing.
func (a *Allocator) EnsurePool(ctx context.Context, def ipam.Pool) (ipam.Pool, error) {
	return a.ensurePool(ctx, def, false)
}

// ensurePool is EnsurePool; with missing (the caller just read the pool
// as absent) its first attempt creates without reading first. The pool it
// returns serves allocations for PoolCacheTTL.
func (a *Allocator) ensurePool(ctx context.Context, def ipam.Pool, missing bool) (ipam.Pool, error) {
	if err := def.Validate(); err != nil {
		return ipam.Pool{}, err
	}
	if p, ok := a.freshPool(def.Name); missing && ok && p.SameDefinition(def) {
		return p, nil // ensured meanwhile by an allocation that missed it too
	}
	var out ipam.Pool
	err := a.retry(ctx, "ensure pool "+def.Name, func() error {
		var stored store.Pool
		err := store.ErrNotFound
		if !missing {
			stored, err = a.store.GetPool(ctx, def.Name)
		}
		missing = false
		switch {
		case errors.Is(err, store.ErrNotFound):
			_, err = a.store.CreatePool(ctx, store.Pool{Spec: def})
			if errors.Is(err, store.ErrExists) {
				return fmt.Errorf("%w: %w", store.ErrConflict, err)
			}
			out = def
			return err
		case err != nil:
			return err
		case stored.Spec.SameDefinition(def):
			out = stored.Spec
			return nil
		case stored.Spec.Origin != "import" || stored.Spec.CIDR != def.CIDR || stored.Spec.BlockSize != def.BlockSize:
			return fmt.Errorf("%w: pool %q is stored as %s, the config asks for %s; remove it with 'ipkeeperctl pool rm %s' once it is empty, or use another range",
				ErrPoolConflict, def.Name, describe(stored.Spec), describe(def), def.Name)
		}
		_, err = a.updatePool(ctx, store.Pool{Spec: def, Version: stored.Version})
		out = def
		out.Reserved = stored.Spec.Reserved
		return err
	})
	if err == nil {
		a.cachePool(out)
	}
	return out, err
}

// CreatePool stores a new pool; it fails with ErrPoolConflict when a pool
// of that name exists.
func (a *Allocator) CreatePool(ctx context.Context, pool ipam.Pool) error {
	if err := pool.Validate(); err != nil {
		return err
	}
	_, err := a.store.CreatePool(ctx, store.Pool{Spec: pool})
	if errors.Is(err, store.ErrExists) {
		return fmt.Errorf("%w: pool %q already exists", ErrPoolConflict, pool.Name)
	}
	return err
}

// Pool returns one pool.
func (a *Allocator) Pool(ctx context.Context, name string) (ipam.Pool, error) {
	return readPool(ctx, name, a.store.GetPool)
}

// readPool reads pool name with get; an absent pool is ErrPoolNotFound.
func readPool(ctx context.Context, name string, get func(context.Context, string) (store.Pool, error)) (ipam.Pool, error) {
	p, err := get(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return ipam.Pool{}, fmt.Errorf("%w: %q", ErrPoolNotFound, name)
	}
	return p.Spec, storeErr(err)
}

// Pools returns every pool, sorted by name.
func (a *Allocator) Pools(ctx context.Context) ([]ipam.Pool, error) {
	ps, err := a.store.ListPools(ctx)
	if err != nil {
		return nil, storeErr(err)
	}
	out := make([]ipam.Pool, len(ps))
	for i, p := range ps {
		out[i] = p.Spec
	}
	return out, nil
}

// DeletePool removes a pool with its (empty) blocks and their claims. It
// refuses with ErrPoolInUse while any address is allocated, saying how
// many, and then leaves the pool usable.
//
// It first marks the pool Deleting, so that no allocation that reads the
// pool from then on uses it. An allocation that read it before the mark
// either wrote its node's object before the removal reads that object (the
// removal then finds the address and refuses), or its write fails because
// the removal wrote the object first (taking the pool's empty blocks out),
// and its retry reads the mark. A claim created after the removal listed
// the claims is returned by its allocation, which reads the pool after
// claiming (createClaim). The pool goes last: a removal that stops half
// way leaves a marked pool that the next DeletePool finishes, or that
// CancelPoolRemoval keeps.
func (a *Allocator) DeletePool(ctx context.Context, name string) error {
	var marked store.Pool
	err := a.retry(ctx, "delete pool "+name, func() error {
		p, err := a.store.GetPool(ctx, name)
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("%w: %q", ErrPoolNotFound, name)
		}
		if err != nil || p.Spec.Deleting {
			marked = p
			return err
		}
		p.Spec.Deleting = true
		marked, err = a.updatePool(ctx, p)
		return err
	})
	if err != nil {
		return err
	}
	if err := a.retry(ctx, "delete pool "+name, func() error { return a.removeMarked(ctx, name) }); err != nil {
		return err
	}
	err = a.retry(ctx, "delete pool "+name, func() error {
		err := a.store.DeletePool(ctx, marked)
		if errors.Is(err, store.ErrConflict) {
			if marked, err = a.store.GetPool(ctx, name); err == nil && !marked.Spec.Deleting {
				return fmt.Errorf("%w: the removal of pool %q was cancelled meanwhile ('ipkeeperctl pool rm --cancel'); it stays", ErrPoolConflict, name)
			}
			return fmt.Errorf("%w: pool %q", store.ErrConflict, name)
		}
		if errors.Is(err, store.ErrNotFound) {
			return nil // another pool rm finished it
		}
		return err
	})
	return err
}

// removeMarked takes every block of a marked pool out of its holder's
// object and deletes its claim, or, finding an address in use, clears the
// mark and refuses.
func (a *Allocator) removeMarked(ctx context.Context, name string) error {
	claims, err := a.store.ListClaims(ctx, store.ClaimSelector{Pool: name})
	if err != nil {
		return err
	}
	inUse := 0
	for _, c := range claims {
		n, err := a.store.GetNode(ctx, c.Node)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return storeErr(err)
		}
		if b, ok := n.Block(c.BlockRef); ok {
			inUse += b.InUse()
		}
	}
	if inUse > 0 {
		err := a.retry(ctx, "keep pool "+name, func() error {
			p, err := a.store.GetPool(ctx, name)
			if err != nil {
				return err
			}
			p.Spec.Deleting = false
			_, err = a.updatePool(ctx, p)
			return err
		})
		if err != nil {
			return err
		}
		return fmt.Errorf("%w: pool %q has %d addresses in use; it stays usable, release them first", ErrPoolInUse, name, inUse)
	}
	for _, c := range claims {
		n, err := a.store.GetNode(ctx, c.Node)
		switch {
		case errors.Is(err, store.ErrNotFound):
			// The claim's node has not written its object yet: an
			// allocation that claimed the block is on its way. Create the
			// object empty, so that the allocation's create fails and its
			// retry reads the mark (or, created first, it is found in use
			// by the next attempt).
			if _, err := a.store.CreateNode(ctx, store.Node{Name: c.Node}); err != nil {
				if errors.Is(err, store.ErrExists) {
					return fmt.Errorf("%w: %w", store.ErrConflict, err)
				}
				return err
			}
		case err != nil:
			return storeErr(err)
		default:
			next, err := nodealloc.RemoveBlock(n, c.BlockRef)
			if errors.Is(err, nodealloc.ErrTaken) {
				// Allocated since the count: the next attempt refuses.
				return fmt.Errorf("%w: %w", store.ErrConflict, err)
			}
			if err == nil {
				if _, err := a.writeNode(ctx, next); err != nil {
					return err
				}
			} else if _, err := a.writeNode(ctx, n); err != nil {
				// The object does not hold the block: write it anyway, so
				// that an allocation that read it before fails.
				return err
			}
		}
		if err := a.deleteClaim(ctx, c); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	return nil
}

// CancelPoolRemoval keeps a pool that an interrupted DeletePool left
// marked Deleting. It reports whether the pool was marked.
func (a *Allocator) CancelPoolRemoval(ctx context.Context, name string) (bool, error) {
	var was bool
	err := a.retry(ctx, "keep pool "+name, func() error {
		p, err := a.store.GetPool(ctx, name)
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("%w: %q", ErrPoolNotFound, name)
		}
		if err != nil {
			return err
		}
		if was = p.Spec.Deleting; !was {
			return nil
		}
		p.Spec.Deleting = false
		_, err = a.updatePool(ctx, p)
		return err
	})
	return was, err
}
