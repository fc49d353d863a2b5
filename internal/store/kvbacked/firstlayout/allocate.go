package firstlayout

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/labels"
)

// Request asks for one address from each range set for one handle: the
// request of package allocator, which the previous version defined.
type Request = allocator.Request

// poolNames lists the pools of every range set of r once, in order.
func poolNames(r Request) []string {
	var names []string
	for _, set := range r.Sets {
		for _, n := range set {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	return names
}

// maxHintBlocks bounds the blocks one hint may name; a larger hint is no
// hint (it was not written by an allocator: a node holds a few blocks).
const maxHintBlocks = 1024

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
	defer a.lockNode(req.Handle.Node)()
	var out ipam.Handle
	err := a.retry(ctx, "allocate "+req.Handle.ID, func() error {
		var err error
		out, err = a.allocateOnce(ctx, req, true)
		if errors.Is(err, errStaleHint) {
			// What the hint said did not hold or did not suffice: read.
			out, err = a.allocateOnce(ctx, req, false)
		}
		return err
	})
	return out, err
}

// errStaleHint means an allocation computed from a hint alone did not
// succeed: something it relied on changed, or it failed for a reason only
// a read can confirm (the handle may exist, a pool may have room). The
// caller retries reading the store.
var errStaleHint = errors.New("allocation hint out of date")

func (a *Allocator) allocateOnce(ctx context.Context, req Request, allowHintOnly bool) (_ ipam.Handle, err error) {
	node := req.Handle.Node
	names := poolNames(req)
	// One read at most: the handle, the pools and the blocks the node is
	// believed to hold. With a complete hint there is no read at all: the
	// commit is guarded by the hinted versions and values and the handle's
	// absence. The affinity index is listed only when the hint is missing,
	// stale or has no room.
	hk := HandleKey(req.Handle.ID)
	poolKeys := make([]string, len(names))
	for i, n := range names {
		poolKeys[i] = PoolKey(n)
	}
	// An attachment whose ID differs from what earlier versions named it
	// also looks for its handle under that name (see handleid.go).
	legacy, hasLegacy := legacyOf(req.Handle.ID)
	hint, hinted := a.hints.Load(node)
	hintedBlocks := hint.blocks()
	if len(hintedBlocks) > maxHintBlocks {
		hinted, hintedBlocks = false, nil
	}
	optimistic := allowHintOnly && hinted && hint.complete(poolKeys)
	defer func() {
		// A failure computed from a hint alone proves nothing: the
		// handle may exist, a pool may have room.
		if optimistic && err != nil && !errors.Is(err, kv.ErrUnavailable) {
			err = errStaleHint
		}
	}()
	var poolEs, blockEs []kv.KeyValue
	legacyE := kv.KeyValue{Key: legacy.key}
	if optimistic {
		for _, k := range poolKeys {
			e, _ := hint.get(k)
			poolEs = append(poolEs, e)
		}
		blockEs = hintedBlocks
	} else {
		keys := append([]string{hk}, poolKeys...)
		if hasLegacy {
			keys = append(keys, legacy.key)
		}
		fixed := len(keys)
		for _, e := range hintedBlocks {
			keys = append(keys, e.Key)
		}
		es, err := a.store.Get(ctx, keys...)
		if err != nil {
			return ipam.Handle{}, err
		}
		if es[0].Version != 0 {
			return decode[ipam.Handle](es[0])
		}
		poolEs, blockEs = es[1:1+len(names)], es[fixed:]
		if hasLegacy {
			legacyE = es[1+len(names)]
			if legacyE.Version != 0 {
				old, err := decode[ipam.Handle](legacyE)
				if err != nil {
					return ipam.Handle{}, err
				}
				if legacy.owns(old) {
					// This attachment's handle, from an earlier version:
					// ADD is idempotent, and the handle moves to its ID.
					return a.rekey(ctx, legacyE, old, req.Handle.ID)
				}
			}
		}
	}
	var conds []kv.Cond
	var ops []kv.Op
	if hasLegacy {
		// No handle of this attachment under its legacy ID appears
		// meanwhile (one that is another attachment's may stay).
		conds = append(conds, kv.Cond{Key: legacyE.Key, Version: legacyE.Version})
	}
	pools := map[string]ipam.Pool{}
	for i, n := range names {
		e := poolEs[i]
		// The pools must not be deleted or redefined meanwhile: DeletePool
		// first marks a pool Deleting, so an allocation that read it before
		// fails this condition and retries into allocator.ErrNoPool, and one that
		// committed first is seen by DeletePool's listing. A pool taken
		// from a hint must also still be what the hint says.
		c := kv.Cond{Key: e.Key, Version: e.Version}
		if optimistic {
			c.Value = e.Value
		}
		conds = append(conds, c)
		def, defined := findPool(req.Define, n)
		switch {
		case defined:
			pool, put, err := reconcilePool(e, def)
			if err != nil {
				return ipam.Handle{}, err
			}
			pools[n] = pool
			if put != nil {
				ops = append(ops, *put)
			}
		case e.Version == 0:
			return ipam.Handle{}, fmt.Errorf("%w: %q", allocator.ErrPoolNotFound, n)
		default:
			pool, err := decode[ipam.Pool](e)
			if err != nil {
				return ipam.Handle{}, err
			}
			pools[n] = pool
		}
		if optimistic {
			if err := pools[n].Validate(); err != nil {
				return ipam.Handle{}, err // redone with reads
			}
		}
	}
	p := a.newPlan()
	nb := &nodeBlocks{a: a, p: p, node: node, pools: pools, byPool: map[string][]netip.Prefix{}, fresh: map[string]bool{}}
	stale := !hinted
	for _, e := range blockEs {
		nb.fresh[e.Key] = !optimistic
		ok, err := nb.add(e, optimistic)
		if err != nil {
			return ipam.Handle{}, err
		}
		stale = stale || !ok
	}
	if stale {
		if err := nb.list(ctx); err != nil {
			return ipam.Handle{}, err
		}
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
			hip, err = a.assignAny(ctx, p, usable, nb, h)
		}
		if err != nil {
			return ipam.Handle{}, fmt.Errorf("range set %d: %w", i, err)
		}
		h.IPs = append(h.IPs, hip)
	}
	for _, w := range req.Want {
		if !slices.ContainsFunc(h.IPs, func(ip ipam.HandleIP) bool { return ip.Addr == w }) {
			return ipam.Handle{}, fmt.Errorf("%w: %s is in no usable pool of the request (pools %s)", allocator.ErrAddrUnavailable, w, strings.Join(names, ", "))
		}
	}
	conds = append(conds, kv.Cond{Key: hk, Version: 0})
	ops = append(ops, kv.Op{Key: hk, Value: Encode(h)})
	rev, err := p.commit(ctx, conds, ops)
	if err != nil {
		if errors.Is(err, kv.ErrConflict) {
			a.hints.Forget(node)
		}
		return ipam.Handle{}, err
	}
	a.hints.Store(node, newHint(poolEs, ops, rev, p, node))
	return h, nil
}

// newHint records what a committed allocation knows: the pools as read or
// written and the node's blocks as written or read.
func newHint(pools []kv.KeyValue, ops []kv.Op, rev int64, p *plan, node string) Hint {
	var h Hint
	for _, e := range pools {
		for _, op := range ops {
			if op.Key == e.Key {
				e = kv.KeyValue{Key: e.Key, Value: op.Value, Version: rev}
			}
		}
		h.Entries = append(h.Entries, e)
	}
	for _, key := range p.order {
		if pb := p.blocks[key]; pb.exists && pb.block.Node == node {
			h.Entries = append(h.Entries, kv.KeyValue{Key: key, Value: pb.raw, Version: pb.version})
		}
	}
	return h
}

func findPool(pools []ipam.Pool, name string) (ipam.Pool, bool) {
	for _, p := range pools {
		if p.Name == name {
			return p, true
		}
	}
	return ipam.Pool{}, false
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
		var why []string
		for _, n := range set {
			if pools[n].Deleting {
				why = append(why, allocator.RemovalAdvice(n))
			}
		}
		if len(why) == 0 {
			return nil, fmt.Errorf("%w: pools %s are disabled or select other nodes", allocator.ErrNoPool, strings.Join(set, ", "))
		}
		if len(why) < len(set) {
			why = append(why, "the others are disabled or select other nodes")
		}
		return nil, fmt.Errorf("%w: %s", allocator.ErrNoPool, strings.Join(why, "; "))
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
func (a *Allocator) assignAny(ctx context.Context, p *plan, pools []ipam.Pool, nb *nodeBlocks, h ipam.Handle) (ipam.HandleIP, error) {
	var names []string
	for _, pool := range pools {
		names = append(names, pool.Name)
		if hip, ok := nb.assign(pool, h.ID); ok {
			return hip, nil
		}
		if !nb.listed {
			// The hinted blocks are full: look for others of the node
			// before claiming a new one.
			if err := nb.list(ctx); err != nil {
				return ipam.HandleIP{}, err
			}
			if hip, ok := nb.assign(pool, h.ID); ok {
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
	return ipam.HandleIP{}, fmt.Errorf("%w: no free address in %s", allocator.ErrExhausted, strings.Join(names, ", "))
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
