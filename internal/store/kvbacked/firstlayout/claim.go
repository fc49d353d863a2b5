package firstlayout

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
)

// claim finds an unclaimed block of the pool with room, claims it for the
// node and assigns from it, all in the pending transaction. When it has to
// list the pool's blocks it returns them for borrowing.
func (a *Allocator) claim(ctx context.Context, p *plan, pool ipam.Pool, h ipam.Handle) ([]kv.KeyValue, ipam.HandleIP, bool, error) {
	first, last := pool.BlockSpan()
	n := last - first + 1
	start := first
	if n > 256 {
		f := fnv.New64a()
		f.Write([]byte(h.Node))
		start = first + f.Sum64()%n
	}
	at := func(i uint64) netip.Prefix { return pool.BlockAt(first + (start-first+i)%n) }
	var keys []string
	for i := uint64(0); i < min(n, claimProbe); i++ {
		keys = append(keys, BlockKey(pool.Name, at(i)))
	}
	es, err := a.store.Get(ctx, keys...)
	if err != nil {
		return nil, ipam.HandleIP{}, false, err
	}
	for i, e := range es {
		if e.Version == 0 {
			if hip, ok := claimBlock(p, pool, at(uint64(i)), h); ok {
				return nil, hip, true, nil
			}
		}
	}
	if n <= claimProbe {
		return es, ipam.HandleIP{}, false, nil
	}
	listed, err := a.store.List(ctx, BlockPrefix+pool.Name+"/")
	if err != nil {
		return nil, ipam.HandleIP{}, false, err
	}
	taken := make(map[string]bool, len(listed))
	for _, e := range listed {
		taken[e.Key] = true
	}
	// Among len(listed)+1 consecutive blocks one is free; blocks without
	// room (outside the range, fully excluded) are skipped on top of that.
	budget := uint64(len(listed)) + 1<<16
	for i := uint64(claimProbe); i < n && i < budget; i++ {
		cidr := at(i)
		if taken[BlockKey(pool.Name, cidr)] {
			continue
		}
		if hip, ok := claimBlock(p, pool, cidr, h); ok {
			return nil, hip, true, nil
		}
	}
	return listed, ipam.HandleIP{}, false, nil
}

// claimBlock creates block cidr affine to the handle's node in the plan.
func claimBlock(p *plan, pool ipam.Pool, cidr netip.Prefix, h ipam.Handle) (ipam.HandleIP, bool) {
	key := BlockKey(pool.Name, cidr)
	pb, seen := p.blocks[key]
	if seen && (pb.exists || pb.dirty) || !pool.HasRoom(cidr) {
		return ipam.HandleIP{}, false
	}
	b, addr, err := ipam.NewBlock(pool, cidr, h.Node).Assign(pool, h.ID)
	if err != nil {
		return ipam.HandleIP{}, false
	}
	if !seen {
		p.order = append(p.order, key)
	}
	p.blocks[key] = &planBlock{block: b, dirty: true}
	aff := AffinityKey(h.Node, pool.Name, cidr)
	p.conds = append(p.conds, kv.Cond{Key: aff, Version: 0})
	p.ops = append(p.ops, kv.Op{Key: aff, Value: []byte(key)})
	return ipam.HandleIP{Addr: addr, Pool: pool.Name, Block: cidr}, true
}

// assignWanted takes one specific address.
func (a *Allocator) assignWanted(ctx context.Context, p *plan, pools []ipam.Pool, want netip.Addr, h ipam.Handle) (ipam.HandleIP, error) {
	i := slices.IndexFunc(pools, func(pl ipam.Pool) bool { return pl.CIDR.Contains(want) })
	pool := pools[i]
	cidr, _ := want.Prefix(pool.BlockSize)
	pb, err := p.block(ctx, pool.Name, cidr)
	if err != nil {
		return ipam.HandleIP{}, err
	}
	if !pb.exists && !pb.dirty {
		if _, ok := claimBlock(p, pool, cidr, h); !ok {
			return ipam.HandleIP{}, fmt.Errorf("%w: %s is not usable in pool %q", allocator.ErrAddrUnavailable, want, pool.Name)
		}
		// claimBlock assigned the first free address; redo it with the
		// wanted one from a fresh block.
		pb = p.blocks[BlockKey(pool.Name, cidr)]
		pb.block = ipam.NewBlock(pool, cidr, h.Node)
	}
	b, err := pb.block.AssignAddr(pool, want, h.ID)
	if err != nil {
		if errors.Is(err, ipam.ErrUnavailable) {
			return ipam.HandleIP{}, fmt.Errorf("%w: %w", allocator.ErrAddrUnavailable, err)
		}
		return ipam.HandleIP{}, err
	}
	p.update(BlockKey(pool.Name, cidr), b)
	return ipam.HandleIP{Addr: want, Pool: pool.Name, Block: cidr}, nil
}
