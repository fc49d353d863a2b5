package config

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// checkUsable rejects a range that leaves no address to hand out, or that
// cannot become a pool for another reason (ipam.Pool.Validate), before
// anything touches a datastore. r is s's range with its excludes.
func checkUsable(s *rangeSpec, r Range, blockV4, blockV6 int) error {
	first, last := r.Bounds()
	if _, ok := firstUsable(r); !ok {
		var taken []string
		if first == r.Subnet.Addr() {
			taken = append(taken, "the network address")
		}
		if first.Is4() && last == ipam.LastAddr(r.Subnet) {
			taken = append(taken, "the broadcast address")
		}
		if r.Gateway.IsValid() && !r.Gateway.Less(first) && !last.Less(r.Gateway) {
			taken = append(taken, "the gateway "+r.Gateway.String())
		}
		if len(r.Exclude) > 0 {
			taken = append(taken, "excluded")
		}
		if len(taken) == 0 { // not reached: firstUsable skips nothing else
			taken = append(taken, "unusable")
		}
		list := taken[len(taken)-1]
		if len(taken) > 1 {
			list = strings.Join(taken[:len(taken)-1], ", ") + " or " + list
		}
		return invalid(s.name, "(%s-%s in %s) has no address to hand out: every address in it is %s",
			first, last, r.Subnet, list)
	}
	p := ipam.Pool{Name: "range", CIDR: r.Subnet, BlockSize: ipam.BlockSizeFor(r.Subnet, blockV4, blockV6),
		RangeStart: r.RangeStart, RangeEnd: r.RangeEnd, Gateway: r.Gateway, Exclude: r.Exclude}
	if err := p.Validate(); err != nil {
		return invalid(s.name, "(%s-%s in %s) cannot become a pool: %v", first, last, r.Subnet, err)
	}
	return nil
}

// firstUsable returns the first address of r that may be handed out:
// within its bounds, not the network or (IPv4) broadcast address, not the
// gateway, not excluded. It takes O(e·log e) steps for e excludes.
func firstUsable(r Range) (netip.Addr, bool) {
	// Prefixes nest or are disjoint: sorted by address and then by length,
	// each one not inside the one kept before it starts a new interval.
	x := slices.Clone(r.Exclude)
	slices.SortFunc(x, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return cmp.Compare(a.Bits(), b.Bits())
	})
	kept := x[:0]
	for _, p := range x {
		if len(kept) > 0 && kept[len(kept)-1].Contains(p.Addr()) {
			continue
		}
		kept = append(kept, p)
	}
	a, last := r.Bounds()
	network, broadcast := r.Subnet.Addr(), ipam.LastAddr(r.Subnet)
	i := 0
	for a.IsValid() && !last.Less(a) {
		for i < len(kept) && ipam.LastAddr(kept[i]).Less(a) {
			i++
		}
		switch {
		case i < len(kept) && kept[i].Contains(a):
			a = ipam.LastAddr(kept[i]).Next()
		case a == network, a.Is4() && a == broadcast, a == r.Gateway:
			a = a.Next()
		default:
			return a, true
		}
	}
	return netip.Addr{}, false
}
