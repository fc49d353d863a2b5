package allocator

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// Errors of reservations.
var (
	// ErrReservedInUse means an address of a reservation asked for is
	// held; nothing was reserved.
	ErrReservedInUse = errors.New("address in use")
	// ErrNotReserved means no reservation matches.
	ErrNotReserved = errors.New("not reserved")
)

// Holder is an allocation holding an address inside a reservation.
type Holder struct {
	Addr   netip.Addr
	Pool   string
	Handle ipam.Handle
}

// String names the holder: address, handle, pod when known, node.
func (h Holder) String() string {
	s := fmt.Sprintf("%s is held by handle %q", h.Addr, h.Handle.ID)
	if h.Handle.Pod != "" {
		s += fmt.Sprintf(" (pod %s/%s)", h.Handle.Namespace, h.Handle.Pod)
	}
	return s + fmt.Sprintf(" on node %q", h.Handle.Node)
}

// HoldersIn returns the allocations holding addresses of pool inside
// cidr, from nodes (every node object), in address order.
func HoldersIn(nodes []store.Node, pool string, cidr netip.Prefix) []Holder {
	var out []Holder
	for _, n := range nodes {
		for _, h := range n.Handles {
			for _, ip := range h.IPs {
				if ip.Pool == pool && cidr.Contains(ip.Addr) {
					out = append(out, Holder{Addr: ip.Addr, Pool: pool, Handle: h})
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b Holder) int { return a.Addr.Compare(b.Addr) })
	return slices.CompactFunc(out, func(a, b Holder) bool { return a.Addr == b.Addr && a.Handle.ID == b.Handle.ID })
}

// Reserve stores r: from the next allocation that reads the pool on, no
// address of r.CIDR is handed out. An address of it held now is refused
// with ErrReservedInUse naming its holder, unless r.WhenFree: then the
// holder keeps it, and once released it is not handed out again while r
// exists. An allocation racing the reservation may still take an address
// of it; `ipkeeperctl check` reports such holders.
func (a *Allocator) Reserve(ctx context.Context, r store.Reservation) (store.Reservation, []Holder, error) {
	if r.Created.IsZero() {
		r.Created = a.Now()
	}
	if _, err := store.EncodeReservation(r); err != nil {
		return store.Reservation{}, nil, err
	}
	p, err := a.Pool(ctx, r.Pool)
	if err != nil {
		return store.Reservation{}, nil, err
	}
	if err := store.ReservationFits(p, r); err != nil {
		return store.Reservation{}, nil, err
	}
	nodes, err := a.store.ListNodes(ctx, store.NodeSelector{})
	if err != nil {
		return store.Reservation{}, nil, storeErr(err)
	}
	held := HoldersIn(nodes, r.Pool, r.CIDR)
	if len(held) > 0 && !r.WhenFree {
		names := make([]string, 0, 3)
		for _, h := range held[:min(3, len(held))] {
			names = append(names, h.String())
		}
		more := ""
		if len(held) > 3 {
			more = fmt.Sprintf(" and %d more", len(held)-3)
		}
		return store.Reservation{}, held, fmt.Errorf("%w: cannot reserve %s in pool %q: %s%s; release it first, or reserve with --when-free to take effect when it is released",
			ErrReservedInUse, r.CIDR, r.Pool, strings.Join(names, "; "), more)
	}
	stored, err := a.store.CreateReservation(ctx, r)
	if err != nil {
		return store.Reservation{}, held, storeErr(err)
	}
	a.pools.Delete(r.Pool)
	return stored, held, nil
}

// Unreserve deletes the reservations of cidr in pool (every pool when
// pool is ""), returning those deleted; ErrNotReserved when none.
func (a *Allocator) Unreserve(ctx context.Context, pool string, cidr netip.Prefix) ([]store.Reservation, error) {
	rs, err := a.store.ListReservations(ctx, store.ReservationSelector{Pool: pool})
	if err != nil {
		return nil, storeErr(err)
	}
	var done []store.Reservation
	for _, r := range rs {
		if r.CIDR != cidr {
			continue
		}
		if err := a.store.DeleteReservation(ctx, r); err != nil && !errors.Is(err, store.ErrNotFound) {
			return done, storeErr(err)
		}
		a.pools.Delete(r.Pool)
		done = append(done, r)
	}
	if len(done) == 0 {
		where := "any pool"
		if pool != "" {
			where = fmt.Sprintf("pool %q", pool)
		}
		return nil, fmt.Errorf("%w: %s in %s", ErrNotReserved, cidr, where)
	}
	return done, nil
}

// Reservations returns the reservations of pool (every pool when "").
func (a *Allocator) Reservations(ctx context.Context, pool string) ([]store.Reservation, error) {
	rs, err := a.store.ListReservations(ctx, store.ReservationSelector{Pool: pool})
	return rs, storeErr(err)
}
