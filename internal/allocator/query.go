package allocator

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/nodealloc"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// Blocks returns the blocks of one pool, or of every pool when pool is "",
// sorted by pool then CIDR, each as its holder's object has it.
func (a *Allocator) Blocks(ctx context.Context, pool string) ([]ipam.Block, error) {
	claims, err := a.store.ListClaims(ctx, store.ClaimSelector{Pool: pool})
	if err != nil {
		return nil, err
	}
	objects := map[string]store.Node{}
	var out []ipam.Block
	for _, c := range claims {
		n, ok := objects[c.Node]
		if !ok {
			if n, err = a.store.GetNode(ctx, c.Node); err != nil && !errors.Is(err, store.ErrNotFound) {
				return nil, storeErr(err)
			}
			objects[c.Node] = n
		}
		if b, held := n.Block(c.BlockRef); held {
			out = append(out, b)
		}
	}
	return out, nil
}

// Block returns the block holding addr (or with prefix cidr) in the pool
// whose CIDR holds it.
func (a *Allocator) Block(ctx context.Context, cidr netip.Prefix) (ipam.Pool, ipam.Block, error) {
	pool, err := a.poolOf(ctx, cidr.Addr())
	if err != nil {
		return ipam.Pool{}, ipam.Block{}, err
	}
	b, err := a.blockOf(ctx, pool, cidr.Addr())
	return pool, b, err
}

// blockOf reads the block of pool holding addr from its holder's object.
func (a *Allocator) blockOf(ctx context.Context, pool ipam.Pool, addr netip.Addr) (ipam.Block, error) {
	blk, _ := addr.Prefix(pool.BlockSize)
	ref := store.BlockRef{Pool: pool.Name, CIDR: blk}
	c, err := a.store.GetClaim(ctx, ref)
	if errors.Is(err, store.ErrNotFound) {
		return ipam.Block{}, fmt.Errorf("%w: block %s of pool %q is not claimed", ErrNotAllocated, blk, pool.Name)
	}
	if err != nil {
		return ipam.Block{}, err
	}
	n, err := a.store.GetNode(ctx, c.Node)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return ipam.Block{}, storeErr(err)
	}
	b, ok := n.Block(ref)
	if !ok {
		return ipam.Block{}, fmt.Errorf("%w: block %s of pool %q is claimed by node %q, whose object does not hold it yet", ErrNotAllocated, blk, pool.Name, c.Node)
	}
	return b, nil
}

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

// ReleaseAddr frees one address whoever holds it and drops it from its
// handle's record, in one write of the object holding its block. It
// returns the handle record that held it.
func (a *Allocator) ReleaseAddr(ctx context.Context, addr netip.Addr) (ipam.Handle, error) {
	return a.releaseAddr(ctx, func() (ipam.Pool, error) { return a.poolOf(ctx, addr) }, addr, "")
}

// ReleaseAddrHeldBy is ReleaseAddr for an address of a named pool that
// only releases while the handle holder holds it (ErrHolderChanged
// otherwise, ErrNotAllocated when it is free).
func (a *Allocator) ReleaseAddrHeldBy(ctx context.Context, poolName string, addr netip.Addr, holder string) (ipam.Handle, error) {
	return a.releaseAddr(ctx, func() (ipam.Pool, error) {
		pool, err := a.Pool(ctx, poolName)
		if err == nil && !pool.CIDR.Contains(addr) {
			err = fmt.Errorf("%w: pool %q does not hold %s", ErrNotAllocated, poolName, addr)
		}
		return pool, err
	}, addr, holder)
}

func (a *Allocator) releaseAddr(ctx context.Context, findPool func() (ipam.Pool, error), addr netip.Addr, holder string) (ipam.Handle, error) {
	var owner ipam.Handle
	var lender string
	err := a.retry(ctx, "release "+addr.String(), func() error {
		pool, err := findPool()
		if err != nil {
			return err
		}
		blk, _ := addr.Prefix(pool.BlockSize)
		c, err := a.store.GetClaim(ctx, store.BlockRef{Pool: pool.Name, CIDR: blk})
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("%w: %s", ErrNotAllocated, addr)
		}
		if err != nil {
			return err
		}
		n, err := a.readNode(ctx, c.Node)
		if err != nil {
			return err
		}
		b, ok := n.Block(c.BlockRef)
		got := b.Owner(addr)
		switch {
		case !ok || got == "":
			return fmt.Errorf("%w: %s", ErrNotAllocated, addr)
		case holder != "" && got != holder:
			return fmt.Errorf("%w: %s is held by %q, not %q", ErrHolderChanged, addr, got, holder)
		}
		rec, _ := n.Handle(got)
		next, err := nodealloc.ReleaseAddr(n, got, addr)
		if err != nil {
			return err
		}
		if _, err := a.writeNode(ctx, next); err != nil {
			return err
		}
		owner = rec
		lender = c.Node
		return nil
	})
	if err != nil || owner.Node == "" || owner.Node == lender || store.ValidName("node", owner.Node) != nil {
		return owner, err // the holder's own block (or no node): no loan
	}
	// A borrowed address: as a DEL drops its loan after the lender's
	// record, the holder's loan goes once the lender holds nothing more
	// of the handle, so that no loan without a record is left behind.
	return owner, a.dropLoanOf(ctx, owner.Node, owner.ID, lender)
}

// dropLoanOf drops node's loan of handle id from lender once the lender's
// object holds no record of it for node.
func (a *Allocator) dropLoanOf(ctx context.Context, node, id, lender string) error {
	defer a.lockNode(node)()
	return a.retry(ctx, "drop the loan of "+id+" from "+lender, func() error {
		ln, err := a.store.GetNode(ctx, lender)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return storeErr(err)
		}
		if r, ok := ln.Handle(id); ok && r.Node == node {
			return nil // it still holds an address there
		}
		own, err := a.readNode(ctx, node)
		if err != nil {
			return err
		}
		loan := store.Loan{Handle: id, Lender: lender}
		if !slices.Contains(own.Loans, loan) {
			return nil
		}
		next := nodealloc.Clone(own)
		next.Loans = slices.DeleteFunc(next.Loans, func(l store.Loan) bool { return l == loan })
		_, err = a.writeNode(ctx, next)
		return err
	})
}

// ReleaseHandles releases every handle for which drop returns true and
// returns the handles released.
func (a *Allocator) ReleaseHandles(ctx context.Context, drop func(ipam.Handle) bool) ([]ipam.Handle, error) {
	hs, err := a.Handles(ctx)
	if err != nil {
		return nil, err
	}
	var out []ipam.Handle
	for _, h := range hs {
		if !drop(h) {
			continue
		}
		if _, err := a.Release(ctx, h.Node, h.ID); err != nil {
			return out, err
		}
		out = append(out, h)
	}
	return out, nil
}
