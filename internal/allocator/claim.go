package allocator

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/nodealloc"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// storeClaimProbe is how many candidate blocks a claim tries to create
// before it lists the pool's claims: each try is a write, a list is one
// request but grows with the pool.
const storeClaimProbe = 4

// storeClaimListAll is the most blocks a pool may have for a claim to list
// its claims straight away instead of trying candidates first.
const storeClaimListAll = 64

// claimBlock claims an unclaimed block of p with room for node: the
// candidates start at a place derived from the node's name (so that nodes
// do not all race for the same first block), the first few are tried
// directly, then the pool's claims are listed and a free one is taken. It
// reports false when every block is claimed.
func (a *Allocator) claimBlock(ctx context.Context, p ipam.Pool, node string) (netip.Prefix, bool, error) {
	first, last := p.BlockSpan()
	n := last - first + 1
	start := first
	if n > 256 {
		f := fnv.New64a()
		f.Write([]byte(node))
		start = first + f.Sum64()%n
	}
	at := func(i uint64) netip.Prefix { return p.BlockAt(first + (start-first+i)%n) }
	try := func(cidr netip.Prefix) (bool, error) {
		if !p.HasRoom(cidr) {
			return false, nil
		}
		_, err := a.createClaim(ctx, p, cidr, node)
		if errors.Is(err, store.ErrExists) {
			return false, nil
		}
		return err == nil, err
	}
	probe := uint64(storeClaimProbe)
	if n <= storeClaimListAll {
		probe = 0 // a small pool: one list says which blocks are free
	}
	for i := uint64(0); i < min(n, probe); i++ {
		if ok, err := try(at(i)); err != nil || ok {
			return at(i), ok, err
		}
	}
	if n <= probe {
		return netip.Prefix{}, false, nil
	}
	// A cached list: a block it shows free that is not is refused by
	// the claim's create-if-absent; one it shows taken that is not is
	// skipped.
	claims, err := a.store.ListClaims(ctx, store.ClaimSelector{Pool: p.Name, Cached: true})
	if err != nil {
		return netip.Prefix{}, false, err
	}
	taken := make(map[netip.Prefix]bool, len(claims))
	for _, c := range claims {
		taken[c.CIDR] = true
	}
	// Among len(claims)+1 consecutive blocks one is unclaimed; blocks
	// without room (outside the range, fully excluded) come on top.
	budget := uint64(len(claims)) + 1<<16
	for i := probe; i < n && i < budget; i++ {
		cidr := at(i)
		if taken[cidr] {
			continue
		}
		if ok, err := try(cidr); err != nil || ok {
			return cidr, ok, err
		}
	}
	return netip.Prefix{}, false, nil
}

// createClaim claims block cidr of p for node, then reads the pool again:
// a pool marked for removal (or redefined) since the allocation read it
// gets its claim back and the allocation fails. Pool removal lists the
// pool's claims after marking it, so either it sees this claim and writes
// the node's object (failing the allocation's write), or this read sees
// the mark.
func (a *Allocator) createClaim(ctx context.Context, p ipam.Pool, cidr netip.Prefix, node string) (store.Claim, error) {
	c, err := a.store.CreateClaim(ctx, store.Claim{BlockRef: store.BlockRef{Pool: p.Name, CIDR: cidr}, Node: node})
	if err != nil {
		return store.Claim{}, err
	}
	now, err := a.store.GetPool(ctx, p.Name)
	var why error
	switch {
	case errors.Is(err, store.ErrNotFound):
		why = fmt.Errorf("%w: %q was removed", ErrPoolNotFound, p.Name)
	case err != nil:
		why = err
	case now.Spec.Deleting:
		why = fmt.Errorf("%w: %s", ErrNoPool, RemovalAdvice(p.Name))
	case !now.Spec.SameDefinition(p):
		why = fmt.Errorf("%w: pool %q was redefined meanwhile", store.ErrConflict, p.Name)
	default:
		return c, nil
	}
	if err := a.deleteClaim(ctx, c); err != nil && !errors.Is(err, store.ErrNotFound) {
		return store.Claim{}, errors.Join(why, fmt.Errorf("returning the claim of %s: %w", cidr, err))
	}
	return store.Claim{}, why
}

// AdoptClaims adds to node's object every block the node has claimed but
// does not hold (an ADD killed after its claim, before its object's
// write), empty, as the node's next ADD would: only the node a claim
// names keeps its block's state, so such a block holds nothing. Claims of
// pools that are gone or being removed, or that are no block of their
// pool, are left to pool removal and the checker. GC runs it for its
// node, so that after a GC the checker finds the node's state whole. It
// returns the blocks it adopted.
func (a *Allocator) AdoptClaims(ctx context.Context, node string) ([]store.BlockRef, error) {
	if err := store.ValidName("node", node); err != nil {
		return nil, err
	}
	defer a.lockNode(node)()
	var adopted []store.BlockRef
	err := a.retry(ctx, "adopt claims of node "+node, func() error {
		adopted = nil
		claims, err := a.store.ListClaims(ctx, store.ClaimSelector{Node: node})
		if err != nil {
			return err
		}
		own, err := a.readNode(ctx, node)
		if err != nil {
			return err
		}
		next := own
		for _, c := range claims {
			if _, held := own.Block(c.BlockRef); held {
				continue
			}
			p, err := a.Pool(ctx, c.Pool)
			if errors.Is(err, ErrPoolNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			if p.Deleting || c.CIDR.Bits() != p.BlockSize || !p.CIDR.Contains(c.CIDR.Addr()) {
				continue
			}
			next = nodealloc.AddBlock(next, p, c.CIDR)
			adopted = append(adopted, c.BlockRef)
		}
		if len(adopted) == 0 {
			return nil
		}
		_, err = a.writeNode(ctx, next)
		return err
	})
	return adopted, err
}
