package config

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// rangeSpec is a range being assembled, with the key paths its messages name.
type rangeSpec struct {
	r   Range
	set int // index of the range set it belongs to
	// name identifies the range in messages, e.g. "ipam.ranges[0][1]".
	name                                    string
	subnetKey, startKey, endKey, gatewayKey string
	// exclude holds the range's own exclude entries (whereabouts ipRanges).
	exclude []netip.Prefix
}

// rawRange is one host-local range object.
type rawRange struct {
	Subnet     json.RawMessage `json:"subnet"`
	RangeStart json.RawMessage `json:"rangeStart"`
	RangeEnd   json.RawMessage `json:"rangeEnd"`
	Gateway    json.RawMessage `json:"gateway"`
}

// hostLocalRanges reads ipam.ranges and host-local's legacy single range at
// the ipam level (which, as in host-local, becomes the first range set).
// A range without a gateway gets the subnet's first address, as host-local does.
func hostLocalRanges(ri *rawIPAM) ([]*rangeSpec, error) {
	var specs []*rangeSpec
	if present(ri.Subnet) {
		s, err := hostLocalRange(rawRange{ri.Subnet, ri.RangeStart, ri.RangeEnd, ri.Gateway}, "ipam", "ipam.subnet", 0)
		if err != nil {
			return nil, err
		}
		specs = append(specs, s)
	} else if k := firstPresent(keyed{"ipam.rangeStart", ri.RangeStart}, keyed{"ipam.rangeEnd", ri.RangeEnd},
		keyed{"ipam.gateway", ri.Gateway}); k != "" {
		return nil, invalid(k, "is set but ipam.subnet is missing; put it inside the ipam.ranges entry it belongs to")
	}
	if present(ri.Ranges) {
		sets, err := boundedList(ri.Ranges, "ipam.ranges", MaxRangeSets, "range sets")
		if err != nil {
			return nil, err
		}
		if len(sets) == 0 {
			return nil, invalid("ipam.ranges", "is empty: give at least one range set")
		}
		set := len(specs)
		for i, rawSet := range sets {
			setKey := fmt.Sprintf("ipam.ranges[%d]", i)
			rs, err := list(rawSet, setKey)
			if err != nil {
				return nil, err
			}
			if n := len(specs) + len(rs); n > MaxRanges {
				return nil, tooMany("ipam.ranges", n, MaxRanges, "ranges")
			}
			if len(rs) == 0 {
				return nil, invalid(setKey, "is an empty range set")
			}
			for j, el := range rs {
				key := fmt.Sprintf("%s[%d]", setKey, j)
				var rr rawRange
				if err := object(el, key, &rr); err != nil {
					return nil, err
				}
				s, err := hostLocalRange(rr, key, key, set)
				if err != nil {
					return nil, err
				}
				specs = append(specs, s)
			}
			set++
		}
	}
	for _, s := range specs {
		if !s.r.Gateway.IsValid() && s.r.UsePodCIDR == 0 {
			s.r.Gateway = s.r.Subnet.Addr().Next()
		}
	}
	return specs, nil
}

// podCIDRKeywords are the subnets that stand for the node's pod CIDR, as
// in Calico's host-local mode, with their IP family.
var podCIDRKeywords = map[string]int{"usePodCidr": 4, "usePodCidrIPv6": 6}

// podCIDRRanges checks usePodCidr ranges and, when the environment holds
// the node's pod CIDRs, puts them in (with the subnet's first address as
// gateway, as for any host-local range); otherwise they stay placeholders.
func podCIDRRanges(specs []*rangeSpec, out *IPAM, env environment) error {
	for _, s := range specs {
		fam := s.r.UsePodCIDR
		if fam == 0 {
			continue
		}
		word := map[int]string{4: "usePodCidr", 6: "usePodCidrIPv6"}[fam]
		if !out.PodAware() {
			return invalid(s.subnetKey, "%q needs ipam.kubernetes.kubeconfig or ipam.kubernetes.agentSocket: the subnet is the Node's spec.podCIDRs, read from the Kubernetes API", word)
		}
		if env.podCIDRs == nil {
			continue
		}
		i := slices.IndexFunc(env.podCIDRs, func(p netip.Prefix) bool { return p.Addr().Is4() == (fam == 4) })
		if i < 0 {
			return fmt.Errorf("%w: %s %q: node %q has no %s pod CIDR (spec.podCIDRs: %v)",
				ErrNoPodCIDR, s.subnetKey, word, out.NodeName, map[int]string{4: "IPv4", 6: "IPv6"}[fam], env.podCIDRs)
		}
		p := env.podCIDRs[i].Masked()
		if p.Addr().Is4In6() {
			return fmt.Errorf("%w: %s %q: node %q has the IPv4-mapped pod CIDR %s", ErrNoPodCIDR, s.subnetKey, word, out.NodeName, p)
		}
		s.r.Subnet, s.r.UsePodCIDR, s.r.Gateway = p, 0, p.Addr().Next()
	}
	return nil
}

// hostLocalRange decodes one host-local range object found at path.
func hostLocalRange(rr rawRange, path, name string, set int) (*rangeSpec, error) {
	s := &rangeSpec{set: set, name: name, subnetKey: path + ".subnet", startKey: path + ".rangeStart",
		endKey: path + ".rangeEnd", gatewayKey: path + ".gateway"}
	if !present(rr.Subnet) {
		return nil, invalid(s.subnetKey, "is missing")
	}
	sub, err := str(rr.Subnet, s.subnetKey)
	if err != nil {
		return nil, err
	}
	if fam, ok := podCIDRKeywords[sub]; ok {
		if k := firstPresent(keyed{s.startKey, rr.RangeStart}, keyed{s.endKey, rr.RangeEnd}, keyed{s.gatewayKey, rr.Gateway}); k != "" {
			return nil, invalid(k, "cannot be combined with %s %q: the node's pod CIDR is not known in advance", s.subnetKey, sub)
		}
		s.r.UsePodCIDR = fam
		return s, nil
	}
	if s.r.Subnet, err = parseCIDR(sub, s.subnetKey); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		raw json.RawMessage
		key string
		dst *netip.Addr
	}{{rr.RangeStart, s.startKey, &s.r.RangeStart}, {rr.RangeEnd, s.endKey, &s.r.RangeEnd}, {rr.Gateway, s.gatewayKey, &s.r.Gateway}} {
		if !present(f.raw) {
			continue
		}
		v, err := str(f.raw, f.key)
		if err != nil {
			return nil, err
		}
		if *f.dst, err = parseAddr(v, f.key); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// checkRanges validates each range, the families of each set, and that no
// two ranges share an address. It takes n·log n steps for n ranges.
func checkRanges(specs []*rangeSpec) error {
	if len(specs) > MaxRanges {
		return tooMany("ipam", len(specs), MaxRanges, "ranges")
	}
	first := map[int]*rangeSpec{} // the first range of each set
	var known []*rangeSpec        // ranges with a subnet (not usePodCidr placeholders)
	for _, s := range specs {
		if s.r.UsePodCIDR == 0 {
			if err := checkRange(s); err != nil {
				return err
			}
			known = append(known, s)
		}
		t, ok := first[s.set]
		if !ok {
			first[s.set] = s
			continue
		}
		if specIs4(t) != specIs4(s) {
			return invalid(s.subnetKey, "%s is %s but %s is %s: a range set holds one IP family",
				specSubnet(s), specFamily(s), t.subnetKey, specFamily(t))
		}
	}
	if len(first) > MaxRangeSets {
		return tooMany("ipam", len(first), MaxRangeSets, "range sets")
	}
	return checkRangeOverlaps(known)
}

// specIs4 reports whether a range (or a usePodCidr placeholder) is IPv4.
func specIs4(s *rangeSpec) bool {
	if s.r.UsePodCIDR != 0 {
		return s.r.UsePodCIDR == 4
	}
	return s.r.Subnet.Addr().Is4()
}

// specFamily names a range's family for messages.
func specFamily(s *rangeSpec) string {
	if specIs4(s) {
		return "IPv4"
	}
	return "IPv6"
}

// specSubnet renders a range's subnet (or placeholder) for messages.
func specSubnet(s *rangeSpec) string {
	switch s.r.UsePodCIDR {
	case 4:
		return "usePodCidr"
	case 6:
		return "usePodCidrIPv6"
	}
	return s.r.Subnet.String()
}

// checkRangeOverlaps reports the first two ranges sharing an address, in
// n·log n steps.
func checkRangeOverlaps(specs []*rangeSpec) error {
	// Sorted by family and first address, ranges are disjoint exactly when
	// each starts after the end of the one before it.
	order := make([]int, len(specs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int {
		fi, _ := specs[i].r.Bounds()
		fj, _ := specs[j].r.Bounds()
		if c := cmp.Compare(fi.BitLen(), fj.BitLen()); c != 0 {
			return c
		}
		return fi.Compare(fj)
	})
	for k := 1; k < len(order); k++ {
		i, prev := order[k], order[k-1]
		sf, _ := specs[i].r.Bounds()
		if _, pl := specs[prev].r.Bounds(); pl.BitLen() == sf.BitLen() && sf.Compare(pl) <= 0 {
			later, earlier := specs[i], specs[prev]
			if prev > i {
				later, earlier = earlier, later
			}
			lf, ll := later.r.Bounds()
			ef, el := earlier.r.Bounds()
			return invalid(later.name, "(%s-%s) overlaps %s (%s-%s)", lf, ll, earlier.name, ef, el)
		}
	}
	return nil
}

// checkRange validates one range on its own.
func checkRange(s *rangeSpec) error {
	sub := s.r.Subnet
	bits := sub.Addr().BitLen()
	if sub.Bits() > bits-2 {
		return invalid(s.subnetKey, "%s is too small to allocate from: a /%d has no usable address (want /%d or shorter)",
			sub, sub.Bits(), bits-2)
	}
	for _, f := range []struct {
		key string
		a   netip.Addr
	}{{s.startKey, s.r.RangeStart}, {s.endKey, s.r.RangeEnd}, {s.gatewayKey, s.r.Gateway}} {
		if !f.a.IsValid() {
			continue
		}
		if f.a.BitLen() != bits {
			return invalid(f.key, "%q is %s but subnet %s is %s", f.a, family(f.a), sub, family(sub.Addr()))
		}
		if !sub.Contains(f.a) {
			return invalid(f.key, "%q is outside subnet %s", f.a, sub)
		}
	}
	if s.r.RangeStart.IsValid() && s.r.RangeEnd.IsValid() && s.r.RangeEnd.Less(s.r.RangeStart) {
		return invalid(s.startKey, "%q is after %s %q", s.r.RangeStart, s.endKey, s.r.RangeEnd)
	}
	if gw := s.r.Gateway; gw == sub.Addr() {
		return invalid(s.gatewayKey, "%q is the network address of subnet %s, which no host can have", gw, sub)
	} else if gw.Is4() && gw == ipam.LastAddr(sub) {
		return invalid(s.gatewayKey, "%q is the broadcast address of subnet %s, which no host can have", gw, sub)
	}
	return nil
}

// assemble gives each range the exclude entries (its own and the
// ipam-level ones) that overlap its subnet, checks that it can become a
// pool with an address to hand out, and groups the ranges into sets.
func assemble(specs []*rangeSpec, global []netip.Prefix, blockV4, blockV6 int) ([][]Range, error) {
	n := len(global)
	for _, s := range specs {
		n += len(s.exclude)
	}
	if n > MaxExcludes {
		return nil, tooMany("ipam", n, MaxExcludes, "exclude entries (ipam.exclude and every range's exclude together)")
	}
	var sets [][]Range
	for _, s := range specs {
		for len(sets) <= s.set {
			sets = append(sets, nil)
		}
		r := s.r
		r.Exclude = nil
		if r.UsePodCIDR != 0 {
			sets[s.set] = append(sets[s.set], r) // checked once the pod CIDR is known
			continue
		}
		seen := map[netip.Prefix]bool{}
		for _, p := range slices.Concat(s.exclude, global) {
			if p.Overlaps(r.Subnet) && !seen[p] {
				seen[p] = true
				r.Exclude = append(r.Exclude, p)
			}
		}
		if err := checkUsable(s, r, blockV4, blockV6); err != nil {
			return nil, err
		}
		sets[s.set] = append(sets[s.set], r)
	}
	return sets, nil
}
