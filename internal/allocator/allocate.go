package allocator

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/labels"
)

// Request asks for one address from each range set for one handle.
type Request struct {
	// Handle carries the ID, node and attributes; its IPs are ignored.
	Handle ipam.Handle
	// Sets lists, per range set, the names of the pools to try in order.
	Sets [][]string
	// Labels are the node's labels, matched against pool node selectors.
	Labels map[string]string
	// Want optionally names specific addresses; each is taken from the
	// range set whose pools contain it.
	Want []netip.Addr
}

// claimProbe is how many candidate blocks a claim reads before it falls
// back to listing the pool's blocks.
const claimProbe = 16

// Allocate gives the handle one address from every range set, atomically:
// all of them or none. Repeating it for an existing handle returns the
// handle as stored.
func (a *Allocator) Allocate(ctx context.Context, req Request) (ipam.Handle, error) {
	if req.Handle.ID == "" || req.Handle.Node == "" || strings.Contains(req.Handle.Node, "/") {
		return ipam.Handle{}, fmt.Errorf("allocate: handle ID and a node name without '/' are required (node %q)", req.Handle.Node)
	}
	var out ipam.Handle
	err := a.retry(ctx, "allocate "+req.Handle.ID, func() error {
		var err error
		out, err = a.allocateOnce(ctx, req)
		return err
	})
	return out, err
}

func (a *Allocator) allocateOnce(ctx context.Context, req Request) (ipam.Handle, error) {
	keys := []string{HandleKey(req.Handle.ID)}
	var names []string
	for _, set := range req.Sets {
		for _, n := range set {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	for _, n := range names {
		keys = append(keys, PoolKey(n))
	}
	es, err := a.store.Get(ctx, keys...)
	if err != nil {
		return ipam.Handle{}, err
	}
	if es[0].Version != 0 {
		return decode[ipam.Handle](es[0])
	}
	pools := map[string]ipam.Pool{}
	for i, n := range names {
		if es[i+1].Version == 0 {
			return ipam.Handle{}, fmt.Errorf("%w: %q", ErrPoolNotFound, n)
		}
		if pools[n], err = decode[ipam.Pool](es[i+1]); err != nil {
			return ipam.Handle{}, err
		}
	}
	p := newPlan(a.store)
	affine, err := a.readAffine(ctx, p, req.Handle.Node, pools)
	if err != nil {
		return ipam.Handle{}, err
	}
	h := req.Handle
	h.IPs = nil
	h.Created = a.Now().UTC()
	for i, set := range req.Sets {
		usable, err := usablePools(set, pools, req.Labels)
		if err != nil {
			return ipam.Handle{}, fmt.Errorf("range set %d: %w", i, err)
		}
		var hip ipam.HandleIP
		if want, ok := wanted(req.Want, usable); ok {
			hip, err = a.assignWanted(ctx, p, usable, want, h)
		} else {
			hip, err = a.assignAny(ctx, p, usable, affine, h)
		}
		if err != nil {
			return ipam.Handle{}, fmt.Errorf("range set %d: %w", i, err)
		}
		h.IPs = append(h.IPs, hip)
	}
	for _, w := range req.Want {
		if !slices.ContainsFunc(h.IPs, func(ip ipam.HandleIP) bool { return ip.Addr == w }) {
			return ipam.Handle{}, fmt.Errorf("%w: %s is in no usable pool of the request (pools %s)", ErrAddrUnavailable, w, strings.Join(names, ", "))
		}
	}
	conds := []kv.Cond{{Key: HandleKey(h.ID), Version: 0}}
	ops := []kv.Op{{Key: HandleKey(h.ID), Value: encode(h)}}
	for i := range names {
		// The pools must not be deleted or redefined meanwhile: DeletePool
		// first marks a pool Deleting, so an allocation that read it before
		// fails this condition and retries into ErrNoPool, and one that
		// committed first is seen by DeletePool's listing.
		pe := es[i+1]
		conds = append(conds, kv.Cond{Key: pe.Key, Version: pe.Version})
	}
	if err := p.commit(ctx, conds, ops); err != nil {
		return ipam.Handle{}, err
	}
	return h, nil
}

// readAffine reads the node's own blocks of the given pools: the affinity
// index bounds what an allocation reads, whatever the cluster's size.
func (a *Allocator) readAffine(ctx context.Context, p *plan, node string, pools map[string]ipam.Pool) (map[string][]netip.Prefix, error) {
	es, err := a.store.List(ctx, affinityPrefix+node+"/")
	if err != nil {
		return nil, err
	}
	affine := map[string][]netip.Prefix{}
	var keys []string
	for _, e := range es {
		pool, cidr, ok := parseAffinityKey(node, e.Key)
		if _, want := pools[pool]; !ok || !want {
			continue
		}
		affine[pool] = append(affine[pool], cidr)
		keys = append(keys, BlockKey(pool, cidr))
	}
	if len(keys) > 0 {
		bs, err := a.store.Get(ctx, keys...)
		if err != nil {
			return nil, err
		}
		for _, b := range bs {
			if err := p.remember(b); err != nil {
				return nil, err
			}
		}
	}
	for _, cidrs := range affine {
		slices.SortFunc(cidrs, func(x, y netip.Prefix) int { return x.Addr().Compare(y.Addr()) })
	}
	return affine, nil
}

// usablePools returns the pools of a set that may hand out addresses on a
// node with the given labels.
func usablePools(set []string, pools map[string]ipam.Pool, nodeLabels map[string]string) ([]ipam.Pool, error) {
	var out []ipam.Pool
	for _, n := range set {
		pool := pools[n]
		if pool.Disabled || pool.Deleting {
			continue
		}
		sel, err := labels.Parse(pool.NodeSelector)
		if err != nil {
			return nil, fmt.Errorf("pool %q nodeSelector: %w", n, err)
		}
		if sel.Matches(nodeLabels) {
			out = append(out, pool)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: pools %s are disabled or select other nodes", ErrNoPool, strings.Join(set, ", "))
	}
	return out, nil
}

func wanted(want []netip.Addr, pools []ipam.Pool) (netip.Addr, bool) {
	for _, w := range want {
		for _, pool := range pools {
			if pool.CIDR.Contains(w) {
				return w, true
			}
		}
	}
	return netip.Addr{}, false
}

// assignAny takes an address from the first pool that has one: from the
// node's own blocks, else from a newly claimed block, else borrowed from
// another node's block unless the pool is strict.
func (a *Allocator) assignAny(ctx context.Context, p *plan, pools []ipam.Pool, affine map[string][]netip.Prefix, h ipam.Handle) (ipam.HandleIP, error) {
	var names []string
	for _, pool := range pools {
		names = append(names, pool.Name)
		for _, cidr := range affine[pool.Name] {
			if hip, ok := tryAssign(p, pool, BlockKey(pool.Name, cidr), h.ID); ok {
				return hip, nil
			}
		}
		listed, hip, ok, err := a.claim(ctx, p, pool, h)
		if err != nil || ok {
			return hip, err
		}
		if pool.StrictAffinity {
			continue
		}
		for _, e := range listed {
			if err := p.remember(e); err != nil {
				return ipam.HandleIP{}, err
			}
			if hip, ok := tryAssign(p, pool, e.Key, h.ID); ok {
				return hip, nil
			}
		}
	}
	return ipam.HandleIP{}, fmt.Errorf("%w: no free address in %s", ErrExhausted, strings.Join(names, ", "))
}

// tryAssign assigns from a block already in the plan.
func tryAssign(p *plan, pool ipam.Pool, key, handle string) (ipam.HandleIP, bool) {
	pb := p.blocks[key]
	if pb == nil || !pb.exists && !pb.dirty {
		return ipam.HandleIP{}, false
	}
	b, addr, err := pb.block.Assign(pool, handle)
	if err != nil {
		return ipam.HandleIP{}, false
	}
	p.update(key, b)
	return ipam.HandleIP{Addr: addr, Pool: pool.Name, Block: b.CIDR}, true
}

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
	listed, err := a.store.List(ctx, blockPrefix+pool.Name+"/")
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
			return ipam.HandleIP{}, fmt.Errorf("%w: %s is not usable in pool %q", ErrAddrUnavailable, want, pool.Name)
		}
		// claimBlock assigned the first free address; redo it with the
		// wanted one from a fresh block.
		pb = p.blocks[BlockKey(pool.Name, cidr)]
		pb.block = ipam.NewBlock(pool, cidr, h.Node)
	}
	b, err := pb.block.AssignAddr(pool, want, h.ID)
	if err != nil {
		if errors.Is(err, ipam.ErrUnavailable) {
			return ipam.HandleIP{}, fmt.Errorf("%w: %w", ErrAddrUnavailable, err)
		}
		return ipam.HandleIP{}, err
	}
	p.update(BlockKey(pool.Name, cidr), b)
	return ipam.HandleIP{Addr: want, Pool: pool.Name, Block: cidr}, nil
}
