package allocator

import (
	"context"
	"errors"
	"net/netip"
	"slices"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/nodealloc"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// ReleaseOneAddr is ReleaseAddrHeldBy for `ipkeeperctl ip release`: it
// releases addr of pool poolName while holder holds it and, when that was
// the last address the holder borrowed from the block's node, then drops
// the holder node's loan naming that lender — as a DEL drops a loan after
// the lender's record — so that no loan without a record is left behind.
// It returns the record that held the address.
func (a *StoreAllocator) ReleaseOneAddr(ctx context.Context, poolName string, addr netip.Addr, holder string) (ipam.Handle, error) {
	owner, err := a.ReleaseAddrHeldBy(ctx, poolName, addr, holder)
	if err != nil {
		return owner, err
	}
	pool, err := a.Pool(ctx, poolName)
	if err != nil {
		return owner, err
	}
	blk, _ := addr.Prefix(pool.BlockSize)
	c, err := a.store.GetClaim(ctx, store.BlockRef{Pool: poolName, CIDR: blk})
	if errors.Is(err, store.ErrNotFound) {
		return owner, nil
	}
	if err != nil {
		return owner, storeErr(err)
	}
	if owner.Node == "" || owner.Node == c.Node || store.ValidName("node", owner.Node) != nil {
		return owner, nil // the holder's own block: no loan
	}
	return owner, a.dropLoanOf(ctx, owner.Node, owner.ID, c.Node)
}

// dropLoanOf drops node's loan of handle id from lender once the lender's
// object holds no record of it for node.
func (a *StoreAllocator) dropLoanOf(ctx context.Context, node, id, lender string) error {
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
