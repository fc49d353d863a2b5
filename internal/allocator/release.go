package allocator

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
)

// Release frees every address of a handle and deletes it, in one
// transaction. Releasing a handle that does not exist is not an error: it
// returns no addresses. The attachment's handle stored under the ID
// earlier versions gave it is released too (see handleid.go).
//
// A release reads the handle (one Get) and takes its blocks from the hint
// of the handle's node when it holds them, as allocations do: in the
// common case (the node's own blocks, hint warm) that is one read and one
// transaction. The commit is guarded by the handle's version and by the
// version and hinted bytes of every block it changes; a block the hint
// says does not give the address to the handle proves nothing, and the
// release is redone with reads, as is one whose commit failed.
func (a *Allocator) Release(ctx context.Context, handleID string) ([]netip.Addr, error) {
	var freed []netip.Addr
	err := a.retry(ctx, "release "+handleID, func() error {
		var err error
		freed, err = a.releaseOnce(ctx, handleID, true)
		if errors.Is(err, errStaleHint) {
			freed, err = a.releaseOnce(ctx, handleID, false)
		}
		return err
	})
	return freed, err
}

func (a *Allocator) releaseOnce(ctx context.Context, handleID string, useHint bool) (freed []netip.Addr, err error) {
	e, err := a.getHandle(ctx, handleID)
	if err != nil || e.Version == 0 {
		return nil, err
	}
	h, err := decode[ipam.Handle](e)
	if err != nil {
		return nil, err
	}
	// Blocks name the handle by the ID it is stored under.
	owner := strings.TrimPrefix(e.Key, HandlePrefix)
	p := a.newPlan()
	var hint Hint
	if useHint && h.Node != "" {
		hint, _ = a.hints.Load(h.Node)
	}
	usedHint := false
	defer func() {
		if usedHint && err != nil && !errors.Is(err, kv.ErrUnavailable) {
			err = errStaleHint
		}
	}()
	var missing []string
	for _, ip := range h.IPs {
		key := BlockKey(ip.Pool, ip.Block)
		if _, ok := p.blocks[key]; ok || slices.Contains(missing, key) {
			continue
		}
		if he, ok := hint.get(key); ok && he.Version != 0 && p.rememberHinted(he) == nil {
			usedHint = true
			continue
		}
		missing = append(missing, key) // not hinted, or a hint that fails validation
	}
	if len(missing) > 0 {
		bs, err := a.store.Get(ctx, missing...)
		if err != nil {
			return nil, err
		}
		for _, b := range bs {
			if err := p.remember(b); err != nil {
				return nil, err
			}
		}
	}
	return a.commitRelease(ctx, p, e.Key, e.Version, h, owner)
}

// commitRelease frees h's addresses in their blocks within p and commits
// that with the deletion of the handle record at key, guarded by its
// version; it returns the addresses freed (those the blocks gave to owner).
func (a *Allocator) commitRelease(ctx context.Context, p *plan, key string, version int64, h ipam.Handle, owner string) ([]netip.Addr, error) {
	var freed []netip.Addr
	for _, ip := range h.IPs {
		ok, err := a.releaseInBlock(ctx, p, ip, owner)
		if err != nil {
			return nil, err
		}
		if ok {
			freed = append(freed, ip.Addr)
		}
	}
	if _, err := p.commit(ctx,
		[]kv.Cond{{Key: key, Version: version}},
		[]kv.Op{{Key: key, Delete: true}}); err != nil {
		return nil, err
	}
	a.refreshHint(p)
	return freed, nil
}

// releaseInBlock frees ip in its block within the plan. An address the
// block does not give to this handle is left alone (reported false): the
// block is the source of truth for ownership. A hinted block that does not
// give it is no proof: errStaleHint.
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
		if pb.hinted {
			return false, errStaleHint
		}
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
// returns the handles released. A handle stored under the ID an earlier
// version gave its attachment is first moved to its ID (see handleid.go),
// so that drop compares the IDs the plugin makes now.
func (a *Allocator) ReleaseHandles(ctx context.Context, drop func(ipam.Handle) bool) ([]ipam.Handle, error) {
	hs, err := a.Handles(ctx)
	if err != nil {
		return nil, err
	}
	var out []ipam.Handle
	for _, h := range hs {
		if _, legacy := canonicalID(h); legacy {
			var ok bool
			if h, ok, err = a.migrateHandle(ctx, HandleKey(h.ID)); err != nil {
				return out, err
			} else if !ok {
				continue // released meanwhile
			}
		}
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
