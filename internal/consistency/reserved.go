package consistency

import (
	"context"
	"fmt"
	"slices"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// KindReserved: an address inside a reservation (`ipkeeperctl reserve`)
// is held: reserved with --when-free while in use, or allocated by an ADD
// that raced the reservation. Not a corruption and never repaired: the
// holder keeps the address; once released it is not handed out again
// while the reservation exists. CheckStore lists these apart from the
// problems (Report.Findings), with the holder.
const KindReserved Kind = "allocated-in-reservation"

// reservedFindings lists the allocations of v inside reservations.
func reservedFindings(ctx context.Context, s store.Store, v *view) ([]Problem, error) {
	rs, err := s.ListReservations(ctx, store.ReservationSelector{})
	if err != nil {
		return nil, fmt.Errorf("consistency: list reservations: %w", err)
	}
	if len(rs) == 0 {
		return nil, nil
	}
	nodes := make([]store.Node, 0, len(v.nodes))
	for _, n := range v.nodes {
		nodes = append(nodes, n)
	}
	var out []Problem
	for _, r := range rs {
		for _, h := range allocator.HoldersIn(nodes, r.Pool, r.CIDR) {
			how := "reserved while in use (--when-free)"
			if !r.WhenFree {
				how = "allocated by an ADD that raced the reservation"
			}
			out = append(out, Problem{Kind: KindReserved, Key: nodeKey(h.Handle.Node), Pool: r.Pool, Block: r.CIDR.String(),
				Addr: h.Addr.String(), Handle: h.Handle.ID, Node: h.Handle.Node,
				Detail: fmt.Sprintf("%s, inside reservation %s (%s); the holder keeps it, and once released it is not handed out while reserved", h, r.CIDR, how)})
		}
	}
	slices.SortStableFunc(out, func(a, b Problem) int { return compareAddr(a.Addr, b.Addr) })
	sortProblems(out)
	return slices.CompactFunc(out, func(a, b Problem) bool { return a.Pool == b.Pool && a.Addr == b.Addr && a.Handle == b.Handle }), nil
}
