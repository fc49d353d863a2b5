package allocator

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
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
	return a.releaseAddr(ctx, func() (ipam.Pool, error) {
		pool, err := a.Pool(ctx, poolName)
		if err == nil && !pool.CIDR.Contains(addr) {
			err = fmt.Errorf("%w: pool %q does not hold %s", ErrNotAllocated, poolName, addr)
		}
		return pool, err
	}, addr, holder)
}
