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

// ErrHolderChanged means an address is no longer held by the handle the
// caller checked before asking to release it.
var ErrHolderChanged = errors.New("address is no longer held by that handle")

// ReleaseAddrHeldBy is ReleaseAddr for an address of a named pool (pools of
// different networks may overlap) that only releases while the handle
// holder holds it: an admin who checked that holder's pod is gone never
// frees an address that was released and handed to a new pod meanwhile.
// It fails with ErrHolderChanged otherwise and with ErrNotAllocated when
// the address is free. Added for ipkeeperctl's `ip release`.
func (a *Allocator) ReleaseAddrHeldBy(ctx context.Context, poolName string, addr netip.Addr, holder string) (ipam.Handle, error) {
	var owner ipam.Handle
	err := a.retry(ctx, "release "+addr.String(), func() error {
		owner = ipam.Handle{ID: holder}
		pool, err := a.Pool(ctx, poolName)
		if err != nil {
			return err
		}
		if !pool.CIDR.Contains(addr) {
			return fmt.Errorf("%w: pool %q does not hold %s", ErrNotAllocated, poolName, addr)
		}
		cidr, _ := addr.Prefix(pool.BlockSize)
		p := newPlan(a.store)
		pb, err := p.block(ctx, pool.Name, cidr)
		if err != nil {
			return err
		}
		got := pb.block.Owner(addr)
		if !pb.exists || got == "" {
			return fmt.Errorf("%w: %s", ErrNotAllocated, addr)
		}
		if got != holder {
			return fmt.Errorf("%w: %s is held by %q, not %q", ErrHolderChanged, addr, got, holder)
		}
		b, err := pb.block.Release(addr, holder)
		if err != nil {
			return err
		}
		p.update(BlockKey(pool.Name, cidr), b)
		es, err := a.store.Get(ctx, HandleKey(holder))
		if err != nil {
			return err
		}
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
				ops = append(ops, kv.Op{Key: es[0].Key, Value: encode(rest)})
			}
		}
		return p.commit(ctx, conds, ops)
	})
	return owner, err
}
