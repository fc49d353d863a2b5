package allocator

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
)

// Release frees every address of a handle and deletes it, in one
// transaction. Releasing a handle that does not exist is not an error: it
// returns no addresses.
func (a *Allocator) Release(ctx context.Context, handleID string) ([]netip.Addr, error) {
	var freed []netip.Addr
	err := a.retry(ctx, "release "+handleID, func() error {
		freed = nil
		es, err := a.store.Get(ctx, HandleKey(handleID))
		if err != nil {
			return err
		}
		if es[0].Version == 0 {
			return nil
		}
		h, err := decode[ipam.Handle](es[0])
		if err != nil {
			return err
		}
		p := a.newPlan()
		for _, ip := range h.IPs {
			ok, err := a.releaseInBlock(ctx, p, ip, handleID)
			if err != nil {
				return err
			}
			if ok {
				freed = append(freed, ip.Addr)
			}
		}
		if _, err := p.commit(ctx,
			[]kv.Cond{{Key: es[0].Key, Version: es[0].Version}},
			[]kv.Op{{Key: es[0].Key, Delete: true}}); err != nil {
			return err
		}
		a.refreshHint(p)
		return nil
	})
	return freed, err
}

// releaseInBlock frees ip in its block within the plan. An address the
// block does not give to this handle is left alone (reported false): the
// block is the source of truth for ownership.
func (a *Allocator) releaseInBlock(ctx context.Context, p *plan, ip ipam.HandleIP, handleID string) (bool, error) {
	pb, err := p.block(ctx, ip.Pool, ip.Block)
	if err != nil {
		return false, err
	}
	if !pb.exists {
		a.log.Warn("handle names a missing block", "handle", handleID, "block", ip.Block, "addr", ip.Addr)
		return false, nil
	}
	b, err := pb.block.Release(ip.Addr, handleID)
	if errors.Is(err, ipam.ErrNotOwner) || errors.Is(err, ipam.ErrNotInBlock) {
		a.log.Warn("handle names an address its block does not give it", "handle", handleID, "addr", ip.Addr, "err", err)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	p.update(BlockKey(ip.Pool, ip.Block), b)
	return true, nil
}

// ReleaseAddr frees one address whoever holds it, and drops it from its
// handle (deleting the handle when it held nothing else), in one
// transaction. It returns the handle that held the address (only its ID
// when the block named a handle that no longer exists).
func (a *Allocator) ReleaseAddr(ctx context.Context, addr netip.Addr) (ipam.Handle, error) {
	return a.releaseAddr(ctx, func() (ipam.Pool, error) { return a.poolOf(ctx, addr) }, addr, "")
}

// releaseAddr releases addr of the pool findPool returns, only while
// holder holds it when holder is not "".
func (a *Allocator) releaseAddr(ctx context.Context, findPool func() (ipam.Pool, error), addr netip.Addr, holder string) (ipam.Handle, error) {
	var owner ipam.Handle
	err := a.retry(ctx, "release "+addr.String(), func() error {
		pool, err := findPool()
		if err != nil {
			return err
		}
		cidr, _ := addr.Prefix(pool.BlockSize)
		p := a.newPlan()
		pb, err := p.block(ctx, pool.Name, cidr)
		if err != nil {
			return err
		}
		got := pb.block.Owner(addr)
		switch {
		case !pb.exists || got == "":
			return fmt.Errorf("%w: %s", ErrNotAllocated, addr)
		case holder != "" && got != holder:
			return fmt.Errorf("%w: %s is held by %q, not %q", ErrHolderChanged, addr, got, holder)
		}
		b, err := pb.block.Release(addr, got)
		if err != nil {
			return err
		}
		p.update(BlockKey(pool.Name, cidr), b)
		es, err := a.store.Get(ctx, HandleKey(got))
		if err != nil {
			return err
		}
		owner = ipam.Handle{ID: got}
		conds := []kv.Cond{{Key: es[0].Key, Version: es[0].Version}}
		var ops []kv.Op
		if es[0].Version != 0 {
			if owner, err = decode[ipam.Handle](es[0]); err != nil {
				return err
			}
			rest := owner
			rest.IPs = slices.DeleteFunc(slices.Clone(owner.IPs), func(ip ipam.HandleIP) bool { return ip.Addr == addr && ip.Pool == pool.Name })
			if len(rest.IPs) == 0 {
				ops = append(ops, kv.Op{Key: es[0].Key, Delete: true})
			} else {
				ops = append(ops, kv.Op{Key: es[0].Key, Value: Encode(rest)})
			}
		}
		if _, err := p.commit(ctx, conds, ops); err != nil {
			return err
		}
		a.refreshHint(p)
		return nil
	})
	return owner, err
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
		if _, err := a.Release(ctx, h.ID); err != nil {
			return out, err
		}
		out = append(out, h)
	}
	return out, nil
}
