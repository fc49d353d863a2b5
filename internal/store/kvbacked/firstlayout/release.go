package firstlayout

import (
	"context"
	"errors"
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
