package allocator

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
)

func isConflict(err error) bool { return errors.Is(err, kv.ErrConflict) }

func listDecoded[T any](ctx context.Context, s kv.Store, prefix string) ([]T, error) {
	es, err := s.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	out := make([]T, 0, len(es))
	for _, e := range es {
		v, err := decode[T](e)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// Handle returns a handle and whether it exists.
func (a *Allocator) Handle(ctx context.Context, id string) (ipam.Handle, bool, error) {
	es, err := a.store.Get(ctx, HandleKey(id))
	if err != nil || es[0].Version == 0 {
		return ipam.Handle{}, false, err
	}
	h, err := decode[ipam.Handle](es[0])
	return h, err == nil, err
}

// Handles returns every handle, sorted by ID.
func (a *Allocator) Handles(ctx context.Context) ([]ipam.Handle, error) {
	return listDecoded[ipam.Handle](ctx, a.store, HandlePrefix)
}

// Blocks returns the blocks of one pool, or of every pool when pool is "".
func (a *Allocator) Blocks(ctx context.Context, pool string) ([]ipam.Block, error) {
	prefix := BlockPrefix
	if pool != "" {
		prefix += pool + "/"
	}
	return listDecoded[ipam.Block](ctx, a.store, prefix)
}

// Block returns the block holding addr (or with prefix cidr) in its pool.
func (a *Allocator) Block(ctx context.Context, cidr netip.Prefix) (ipam.Pool, ipam.Block, error) {
	pool, err := a.poolOf(ctx, cidr.Addr())
	if err != nil {
		return ipam.Pool{}, ipam.Block{}, err
	}
	blk, _ := cidr.Addr().Prefix(pool.BlockSize)
	es, err := a.store.Get(ctx, BlockKey(pool.Name, blk))
	if err != nil {
		return pool, ipam.Block{}, err
	}
	if es[0].Version == 0 {
		return pool, ipam.Block{}, fmt.Errorf("%w: block %s of pool %q is not claimed", ErrNotAllocated, blk, pool.Name)
	}
	b, err := decode[ipam.Block](es[0])
	return pool, b, err
}

// HasFree reports whether the node could get an address from the pool:
// a free address in a block it may use, or an unclaimed block with room.
func (a *Allocator) HasFree(ctx context.Context, pool ipam.Pool, node string) (bool, error) {
	blocks, err := a.Blocks(ctx, pool.Name)
	if err != nil {
		return false, err
	}
	taken := make(map[netip.Prefix]bool, len(blocks))
	for _, b := range blocks {
		taken[b.CIDR] = true
		if (!pool.StrictAffinity || b.Node == node) && b.FreeCount(pool) > 0 {
			return true, nil
		}
	}
	first, last := pool.BlockSpan()
	budget := uint64(len(blocks)) + 1<<16
	for i := first; i <= last && i-first < budget; i++ {
		if cidr := pool.BlockAt(i); !taken[cidr] && pool.HasRoom(cidr) {
			return true, nil
		}
	}
	return false, nil
}
