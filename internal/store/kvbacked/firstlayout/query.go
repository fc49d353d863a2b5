package firstlayout

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
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

// Handle returns a handle and whether it exists. A handle of the
// attachment stored under the ID earlier versions gave it is found too
// (see handleid.go).
func (a *Allocator) Handle(ctx context.Context, id string) (ipam.Handle, bool, error) {
	e, err := a.getHandle(ctx, id)
	if err != nil || e.Version == 0 {
		return ipam.Handle{}, false, err
	}
	h, err := decode[ipam.Handle](e)
	return h, err == nil, err
}

// getHandle reads the entry of handle id: under id, or, when absent there,
// this attachment's handle under the legacy form of id (one Get either
// way). The entry has Version 0 when neither exists.
func (a *Allocator) getHandle(ctx context.Context, id string) (kv.KeyValue, error) {
	keys := []string{HandleKey(id)}
	legacy, hasLegacy := legacyOf(id)
	if hasLegacy {
		keys = append(keys, legacy.key)
	}
	es, err := a.store.Get(ctx, keys...)
	if err != nil {
		return kv.KeyValue{}, err
	}
	if es[0].Version != 0 || !hasLegacy || es[1].Version == 0 {
		return es[0], nil
	}
	old, err := decode[ipam.Handle](es[1])
	if err != nil {
		return kv.KeyValue{}, err
	}
	if !legacy.owns(old) {
		return es[0], nil // another attachment's, which shared the name
	}
	return es[1], nil
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
	es, err := a.store.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	out := make([]ipam.Block, 0, len(es))
	for _, e := range es {
		b, err := decodeBlock(e)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
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
		return pool, ipam.Block{}, fmt.Errorf("%w: block %s of pool %q is not claimed", allocator.ErrNotAllocated, blk, pool.Name)
	}
	b, err := decodeBlock(es[0])
	return pool, b, err
}
