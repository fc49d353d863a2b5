package firstlayout

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
)

// nodeBlocks tracks the blocks one allocation knows to be affine to its
// node: first those the affinity cache hinted (read with the handle), then,
// when needed, every block the affinity index lists.
type nodeBlocks struct {
	a      *Allocator
	p      *plan
	node   string
	pools  map[string]ipam.Pool
	byPool map[string][]netip.Prefix
	listed bool
	// fresh marks blocks read from the store by this attempt; the others
	// came from a hint and may be stale.
	fresh map[string]bool
}

// add takes a block entry read on a hint (or, hinted, taken from one). It
// reports false when the hint was stale: the block is gone or no longer
// the node's. A block that fails validation, or that is not a block of
// its pool, is refused with allocator.ErrCorrupt.
func (nb *nodeBlocks) add(e kv.KeyValue, hinted bool) (bool, error) {
	if e.Version == 0 {
		return false, nil
	}
	remember := nb.p.remember
	if hinted {
		remember = nb.p.rememberHinted
	}
	if err := remember(e); err != nil {
		return false, err
	}
	b := nb.p.blocks[e.Key].block
	if b.Node != nb.node || e.Key != BlockKey(b.Pool, b.CIDR) {
		return false, nil
	}
	pool, ok := nb.pools[b.Pool]
	if ok && (b.CIDR.Bits() != pool.BlockSize || !pool.CIDR.Contains(b.CIDR.Addr())) {
		return false, fmt.Errorf("%w: %s: block %s is not a /%d block of pool %q (%s)", allocator.ErrCorrupt, e.Key, b.CIDR, pool.BlockSize, pool.Name, pool.CIDR)
	}
	if ok && !slices.Contains(nb.byPool[b.Pool], b.CIDR) {
		nb.byPool[b.Pool] = append(nb.byPool[b.Pool], b.CIDR)
		sortPrefixes(nb.byPool[b.Pool])
	}
	return true, nil
}

// list reads the affinity index of the node and every listed block of the
// wanted pools that this attempt has not read from the store (hinted
// blocks included: a hint may say full where a release made room, and no
// claim, borrow or exhaustion may rest on that). What an allocation reads
// stays bounded by the node's own blocks, whatever the cluster's size.
func (nb *nodeBlocks) list(ctx context.Context) error {
	nb.listed = true
	es, err := nb.a.store.List(ctx, AffinityPrefix+nb.node+"/")
	if err != nil {
		return err
	}
	var keys []string
	for _, e := range es {
		pool, cidr, ok := parseAffinityKey(nb.node, e.Key)
		if _, want := nb.pools[pool]; !ok || !want {
			continue
		}
		key := BlockKey(pool, cidr)
		if pb := nb.p.blocks[key]; !nb.fresh[key] && (pb == nil || !pb.dirty) {
			keys = append(keys, key)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	bs, err := nb.a.store.Get(ctx, keys...)
	if err != nil {
		return err
	}
	for _, b := range bs {
		nb.p.forget(b.Key)
		nb.fresh[b.Key] = true
		if _, err := nb.add(b, false); err != nil {
			return err
		}
	}
	return nil
}

// assign takes the first free address of the node's known blocks of pool.
func (nb *nodeBlocks) assign(pool ipam.Pool, handle string) (ipam.HandleIP, bool) {
	for _, cidr := range nb.byPool[pool.Name] {
		if hip, ok := tryAssign(nb.p, pool, BlockKey(pool.Name, cidr), handle); ok {
			return hip, true
		}
	}
	return ipam.HandleIP{}, false
}

func sortPrefixes(ps []netip.Prefix) {
	slices.SortFunc(ps, func(x, y netip.Prefix) int { return x.Addr().Compare(y.Addr()) })
}
