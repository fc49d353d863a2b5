package allocator

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/nodealloc"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// Allocate gives the handle one address from every range set, atomically
// for the node's own object: all of them or none. Repeating it for an
// existing handle returns the handle as stored.
//
// In the common case — the node's blocks have room — it writes the node's
// object once, at the version this process last saw, and reads nothing.
// A block claim creates the block's Claim first (its name is the block's
// uniqueness), then writes the object; a borrowed address (or a requested
// one in another node's block) is written to the lender's object after
// the node's own object recorded the loan, so that whatever a crash
// leaves names this handle and is found by DEL, GC or the controller. A
// failure after the node's own write releases what was written.
// Allocations of one node that wait for each other in this process are
// written together when the node's blocks have room for them (batch.go).
func (a *Allocator) Allocate(ctx context.Context, req Request) (ipam.Handle, error) {
	if req.Handle.ID == "" || store.ValidName("node", req.Handle.Node) != nil {
		return ipam.Handle{}, fmt.Errorf("allocate: handle ID and a node name without '/' are required (node %q)", req.Handle.Node)
	}
	return a.allocateQueued(ctx, req)
}

// allocation is the state one attempt builds: the node's object and the
// lenders' objects as they will be written.
type allocation struct {
	a       *Allocator
	node    string
	own     store.Node
	lenders map[string]store.Node
	pools   map[string]ipam.Pool
	adopted bool
	// confirmed are the blocks this attempt claimed for the node or read
	// the node's claim of (the claim guard needs no list for them).
	confirmed map[store.BlockRef]bool
	// remembered: own is the copy this process last wrote or was told of,
	// not read by this attempt. Only an address of its own blocks is taken
	// from it; anything more returns errRemembered.
	remembered bool
	// taken are the addresses assigned in own and in each lender's object
	// (by name) whose records record writes, once for all range sets.
	taken map[string][]ipam.HandleIP
}

// assigned notes ip, assigned to the handle in object's blocks.
func (al *allocation) assigned(object string, ip ipam.HandleIP) {
	if al.taken == nil {
		al.taken = map[string][]ipam.HandleIP{}
	}
	al.taken[object] = append(al.taken[object], ip)
}

// record gives h's records in own and in the lenders' objects the
// addresses assigned there.
func (al *allocation) record(h ipam.Handle) {
	al.own = nodealloc.Record(al.own, h, al.taken[al.node])
	for l, n := range al.lenders {
		al.lenders[l] = nodealloc.Record(n, h, al.taken[l])
	}
}

// errRemembered: the allocation needs more than the remembered object's
// blocks (a claim, a loan, or the verdict that the pools are exhausted),
// which is decided on the object as read.
var errRemembered = errors.New("needs the node object as stored")

func (a *Allocator) allocateOnce(ctx context.Context, req Request) (ipam.Handle, error) {
	node, id := req.Handle.Node, req.Handle.ID
	own, hinted := a.lastKnown(node)
	if hinted && (hasRecord(own, id) || len(own.LendersOf(id)) > 0) {
		hinted = false // an existing handle is confirmed by a read
	}
	if !hinted {
		var err error
		if own, err = a.readNode(ctx, node); err != nil {
			return ipam.Handle{}, err
		}
		h, parts, found, err := a.handleParts(ctx, own, id)
		if err != nil {
			return ipam.Handle{}, err
		}
		if found && len(h.IPs) == len(req.Sets) {
			// ADD is idempotent, for addresses of blocks claimed by the
			// objects holding them.
			if err := a.verifyHandle(ctx, own, parts); err != nil {
				return ipam.Handle{}, err
			}
			return h, nil
		}
		if found {
			// What an ADD that stopped between its writes left: release it
			// and allocate anew (that ADD never returned an address).
			if _, err := a.release(ctx, node, id, false); err != nil {
				return ipam.Handle{}, err
			}
			return ipam.Handle{}, fmt.Errorf("%w: partial handle %q released", store.ErrConflict, id)
		}
	}
	pools, err := a.requestPools(ctx, req)
	if err != nil {
		return ipam.Handle{}, err
	}
	al := &allocation{a: a, node: node, own: own, lenders: map[string]store.Node{}, pools: pools, remembered: hinted, confirmed: map[store.BlockRef]bool{}}
	h := req.Handle
	h.IPs = nil
	h.Created = a.Now().UTC()
	for i, set := range req.Sets {
		usable, err := usablePools(set, pools, req.Labels)
		if errors.Is(err, ErrNoPool) {
			usable, err = a.confirmUnusable(ctx, set, pools, req.Labels)
		}
		if err != nil {
			return ipam.Handle{}, fmt.Errorf("range set %d: %w", i, err)
		}
		var ip ipam.HandleIP
		if want, ok := wanted(req.Want, usable); ok {
			ip, err = al.takeWanted(ctx, usable, want, h)
		} else {
			ip, err = al.takeAny(ctx, usable, h)
		}
		if errors.Is(err, errRemembered) {
			// Claims, loans and "exhausted" are decided on the object as
			// stored, never on a copy that may be stale (a claim made from
			// it would stay orphaned when the write of the copy fails).
			a.known.Delete(node)
			return a.allocateOnce(ctx, req)
		}
		if (errors.Is(err, ErrExhausted) || errors.Is(err, ErrAddrUnavailable)) && a.forgetTold(req.poolNames()) {
			// Decided on pools as told, whose reservations may have
			// changed since: decide again on pools as stored.
			return a.allocateOnce(ctx, req)
		}
		if err != nil {
			return ipam.Handle{}, fmt.Errorf("range set %d: %w", i, err)
		}
		h.IPs = append(h.IPs, ip)
	}
	for _, w := range req.Want {
		if !slices.ContainsFunc(h.IPs, func(ip ipam.HandleIP) bool { return ip.Addr == w }) {
			return ipam.Handle{}, fmt.Errorf("%w: %s is in no usable pool of the request (pools %s)", ErrAddrUnavailable, w, strings.Join(req.poolNames(), ", "))
		}
	}
	al.record(h)
	lenders := slices.Sorted(func(yield func(string) bool) {
		for l := range al.lenders {
			if !yield(l) {
				return
			}
		}
	})
	if err := a.verifyOwn(ctx, al.own, ownBlocks(al.own, id), al.confirmed); err != nil {
		if hinted && errors.Is(err, ErrBlockNotClaimed) {
			// Judged on a remembered copy: judge again on the object as
			// stored.
			a.known.Delete(node)
			return a.allocateOnce(ctx, req)
		}
		return ipam.Handle{}, err
	}
	for _, l := range lenders {
		al.own.Loans = append(slices.Clip(al.own.Loans), store.Loan{Handle: id, Lender: l})
	}
	if _, err := a.writeNode(ctx, al.own); err != nil {
		return ipam.Handle{}, err
	}
	for _, l := range lenders {
		if _, err := a.writeNode(ctx, al.lenders[l]); err != nil {
			// Undo: the handle's own part and loans, and any lender
			// already written. A conflict then redoes the allocation.
			if _, uerr := a.release(ctx, node, id, false); uerr != nil {
				return ipam.Handle{}, errors.Join(err, fmt.Errorf("undoing the allocation: %w", uerr))
			}
			return ipam.Handle{}, err
		}
	}
	return h, nil
}

func hasRecord(n store.Node, id string) bool {
	_, ok := n.Handle(id)
	return ok
}

// requestPools reads the pools a request names, creating those it defines
// (as EnsurePool does).
func (a *Allocator) requestPools(ctx context.Context, req Request) (map[string]ipam.Pool, error) {
	pools := map[string]ipam.Pool{}
	if err := a.prefetchPools(ctx, req.poolNames()); err != nil {
		return nil, err
	}
	for _, n := range req.poolNames() {
		var p ipam.Pool
		var err error
		def, defined := findPool(req.Define, n)
		p, err = a.poolForAllocation(ctx, n)
		switch {
		case defined && err == nil && p.SameDefinition(def):
		case defined:
			p, err = a.ensurePool(ctx, def, errors.Is(err, ErrPoolNotFound))
		}
		if err != nil {
			return nil, err
		}
		pools[n] = p
	}
	return pools, nil
}

// takeAny takes an address from the first pool that has one: from the
// node's blocks, else from blocks claimed by the node but not yet in its
// object (a claim whose ADD stopped), else from a newly claimed block,
// else borrowed from another node's block unless the pool is strict.
func (al *allocation) takeAny(ctx context.Context, pools []ipam.Pool, h ipam.Handle) (ipam.HandleIP, error) {
	var names []string
	for _, p := range pools {
		names = append(names, p.Name)
		if ip, ok, err := al.take(p, h); err != nil || ok {
			return ip, err
		}
		if al.remembered {
			return ipam.HandleIP{}, errRemembered
		}
		if !al.adopted {
			if err := al.adoptClaims(ctx); err != nil {
				return ipam.HandleIP{}, err
			}
			if ip, ok, err := al.take(p, h); err != nil || ok {
				return ip, err
			}
		}
		cidr, ok, err := al.a.claimBlock(ctx, p, al.node)
		if err != nil {
			return ipam.HandleIP{}, err
		}
		if ok {
			al.confirmed[store.BlockRef{Pool: p.Name, CIDR: cidr}] = true
			al.own = nodealloc.AddBlock(al.own, p, cidr)
			if ip, ok, err := al.take(p, h); err != nil || ok {
				return ip, err
			}
		}
		if p.StrictAffinity {
			continue
		}
		if ip, ok, err := al.borrow(ctx, p, h); err != nil || ok {
			return ip, err
		}
	}
	return ipam.HandleIP{}, fmt.Errorf("%w: no free address in %s", ErrExhausted, strings.Join(names, ", "))
}

// take assigns from the node's own blocks of p.
func (al *allocation) take(p ipam.Pool, h ipam.Handle) (ipam.HandleIP, bool, error) {
	n, ip, err := nodealloc.Assign(al.own, p, h.ID)
	switch {
	case errors.Is(err, nodealloc.ErrNoRoom):
		return ipam.HandleIP{}, false, nil
	case err != nil:
		return ipam.HandleIP{}, false, err
	}
	al.own = n
	al.assigned(al.node, ip)
	return ip, true, nil
}

// adoptClaims adds to the node's object every block the node has claimed
// in a pool of the request but does not hold yet: only the node a claim
// names keeps its block's state, so such a block is empty. The list may
// come from a cache (the common answer, none, costs no wait); each claim
// to adopt is read again, so that a claim deleted meanwhile (a block
// another node may hold now) is never adopted. A claim the cache does not
// show yet stays for the next adoption (GC, the controller).
func (al *allocation) adoptClaims(ctx context.Context) error {
	al.adopted = true
	claims, err := al.a.store.ListClaims(ctx, store.ClaimSelector{Node: al.node, Cached: true})
	if err != nil {
		return err
	}
	for _, c := range claims {
		p, ok := al.pools[c.Pool]
		if !ok || c.CIDR.Bits() != p.BlockSize || !p.CIDR.Contains(c.CIDR.Addr()) {
			continue
		}
		if _, held := al.own.Block(c.BlockRef); held {
			continue
		}
		now, err := al.a.store.GetClaim(ctx, c.BlockRef)
		if errors.Is(err, store.ErrNotFound) || err == nil && now.Node != al.node {
			continue
		}
		if err != nil {
			return err
		}
		al.confirmed[c.BlockRef] = true
		al.own = nodealloc.AddBlock(al.own, p, c.CIDR)
	}
	return nil
}

// borrow takes a free address of pool p from another node's block.
func (al *allocation) borrow(ctx context.Context, p ipam.Pool, h ipam.Handle) (ipam.HandleIP, bool, error) {
	// A cached list: a lender's object is read (and written with
	// compare-and-swap) before anything is taken from it.
	claims, err := al.a.store.ListClaims(ctx, store.ClaimSelector{Pool: p.Name, Cached: true})
	if err != nil {
		return ipam.HandleIP{}, false, err
	}
	var lenders []string
	for _, c := range claims {
		if c.Node != al.node && !slices.Contains(lenders, c.Node) {
			lenders = append(lenders, c.Node)
		}
	}
	for _, l := range lenders {
		ln, err := al.lender(ctx, l)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return ipam.HandleIP{}, false, err
		}
		n, ip, err := nodealloc.Assign(ln, p, h.ID)
		if errors.Is(err, nodealloc.ErrNoRoom) {
			continue
		}
		if err != nil {
			return ipam.HandleIP{}, false, err
		}
		if err := al.a.verifyLent(ctx, l, store.BlockRef{Pool: ip.Pool, CIDR: ip.Block}); err != nil {
			return ipam.HandleIP{}, false, err
		}
		al.lenders[l] = n
		al.assigned(l, ip)
		return ip, true, nil
	}
	return ipam.HandleIP{}, false, nil
}

// lender returns a lender's object as this allocation will write it.
func (al *allocation) lender(ctx context.Context, name string) (store.Node, error) {
	if n, ok := al.lenders[name]; ok {
		return n, nil
	}
	n, err := al.a.store.GetNode(ctx, name)
	return n, storeErr(err)
}

// takeWanted takes one specific address: from the node's blocks, from a
// block it claims for it, or from the block of the node that holds it.
func (al *allocation) takeWanted(ctx context.Context, pools []ipam.Pool, want netip.Addr, h ipam.Handle) (ipam.HandleIP, error) {
	p := pools[slices.IndexFunc(pools, func(pl ipam.Pool) bool { return pl.CIDR.Contains(want) })]
	cidr, _ := want.Prefix(p.BlockSize)
	ref := store.BlockRef{Pool: p.Name, CIDR: cidr}
	unavailable := func(err error) (ipam.HandleIP, error) {
		if errors.Is(err, nodealloc.ErrTaken) {
			return ipam.HandleIP{}, fmt.Errorf("%w: %w", ErrAddrUnavailable, err)
		}
		return ipam.HandleIP{}, err
	}
	if _, ok := al.own.Block(ref); !ok {
		if al.remembered {
			return ipam.HandleIP{}, errRemembered
		}
		c, err := al.a.store.GetClaim(ctx, ref)
		switch {
		case errors.Is(err, store.ErrNotFound):
			if !p.Permits(want) {
				return ipam.HandleIP{}, fmt.Errorf("%w: %s is not usable in pool %q", ErrAddrUnavailable, want, p.Name)
			}
			if _, err := al.a.createClaim(ctx, p, cidr, al.node); err != nil {
				return ipam.HandleIP{}, err
			}
		case err != nil:
			return ipam.HandleIP{}, err
		case c.Node != al.node:
			// The claim just read names the lender: the block is its.
			ln, err := al.lender(ctx, c.Node)
			if err != nil {
				return ipam.HandleIP{}, fmt.Errorf("%s is in block %s of node %q: %w", want, cidr, c.Node, err)
			}
			n, ip, err := nodealloc.AssignAddr(ln, p, want, h.ID)
			if err != nil {
				return unavailable(err)
			}
			al.lenders[c.Node] = n
			al.assigned(c.Node, ip)
			return ip, nil
		}
		al.confirmed[ref] = true
		al.own = nodealloc.AddBlock(al.own, p, cidr)
	}
	n, ip, err := nodealloc.AssignAddr(al.own, p, want, h.ID)
	if err != nil {
		return unavailable(err)
	}
	al.own = n
	al.assigned(al.node, ip)
	return ip, nil
}
