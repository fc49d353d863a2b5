package config

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
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
		sets, err := list(ri.Ranges, "ipam.ranges")
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
		if !s.r.Gateway.IsValid() {
			s.r.Gateway = s.r.Subnet.Addr().Next()
		}
	}
	return specs, nil
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
// two ranges share an address.
func checkRanges(specs []*rangeSpec) error {
	for _, s := range specs {
		if err := checkRange(s); err != nil {
			return err
		}
	}
	for i, s := range specs {
		for _, t := range specs[:i] {
			if t.set == s.set && t.r.Subnet.Addr().Is4() != s.r.Subnet.Addr().Is4() {
				return invalid(s.subnetKey, "%s is %s but %s is %s: a range set holds one IP family",
					s.r.Subnet, family(s.r.Subnet.Addr()), t.subnetKey, family(t.r.Subnet.Addr()))
			}
			sf, sl := s.r.Bounds()
			tf, tl := t.r.Bounds()
			if sf.BitLen() == tf.BitLen() && sf.Compare(tl) <= 0 && tf.Compare(sl) <= 0 {
				return invalid(s.name, "(%s-%s) overlaps %s (%s-%s)", sf, sl, t.name, tf, tl)
			}
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
	return nil
}

// assemble groups the ranges into sets and gives each range the exclude
// entries (its own and the ipam-level ones) that overlap its subnet.
func assemble(specs []*rangeSpec, global []netip.Prefix) [][]Range {
	var sets [][]Range
	for _, s := range specs {
		for len(sets) <= s.set {
			sets = append(sets, nil)
		}
		r := s.r
		r.Exclude = nil
		for _, p := range slices.Concat(s.exclude, global) {
			if p.Overlaps(r.Subnet) && !slices.Contains(r.Exclude, p) {
				r.Exclude = append(r.Exclude, p)
			}
		}
		sets[s.set] = append(sets[s.set], r)
	}
	return sets
}
