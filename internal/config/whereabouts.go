package config

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
)

// rawWhereaboutsRange is one whereabouts range: the ipam-level keys or one
// ipRanges entry.
type rawWhereaboutsRange struct {
	Range      json.RawMessage `json:"range"`
	RangeStart json.RawMessage `json:"range_start"`
	RangeEnd   json.RawMessage `json:"range_end"`
	Exclude    json.RawMessage `json:"exclude"`
}

// whereaboutsRanges reads ipam.range (with range_start/range_end) and
// ipam.ipRanges; as in whereabouts the ipam-level range comes first and each
// range is a range set of its own. No gateway is set unless ipam.gateway is
// given; it goes to every range whose subnet contains it.
func whereaboutsRanges(ri *rawIPAM) ([]*rangeSpec, error) {
	var specs []*rangeSpec
	if present(ri.Range) {
		s, err := whereaboutsRange(rawWhereaboutsRange{Range: ri.Range, RangeStart: ri.RangeStartW, RangeEnd: ri.RangeEndW},
			"ipam", 0)
		if err != nil {
			return nil, err
		}
		specs = append(specs, s)
	} else if k := firstPresent(keyed{"ipam.range_start", ri.RangeStartW}, keyed{"ipam.range_end", ri.RangeEndW}); k != "" {
		return nil, invalid(k, "is set but ipam.range is missing")
	}
	if present(ri.IPRanges) {
		l, err := boundedList(ri.IPRanges, "ipam.ipRanges", MaxRangeSets, "ranges (each is a range set)")
		if err != nil {
			return nil, err
		}
		for i, el := range l {
			key := fmt.Sprintf("ipam.ipRanges[%d]", i)
			var rw rawWhereaboutsRange
			if err := object(el, key, &rw); err != nil {
				return nil, err
			}
			s, err := whereaboutsRange(rw, key, len(specs))
			if err != nil {
				return nil, err
			}
			specs = append(specs, s)
		}
	}
	if len(specs) == 0 {
		return nil, invalid("ipam.ipRanges", "is empty and there is no ipam.range")
	}
	if present(ri.Gateway) {
		v, err := str(ri.Gateway, "ipam.gateway")
		if err != nil {
			return nil, err
		}
		gw, err := parseAddr(v, "ipam.gateway")
		if err != nil {
			return nil, err
		}
		var subnets []string
		matched := false
		for _, s := range specs {
			if s.r.Subnet.Contains(gw) {
				s.r.Gateway, matched = gw, true
			}
			subnets = append(subnets, s.r.Subnet.String())
		}
		if !matched {
			return nil, invalid("ipam.gateway", "%q is outside every range's subnet (%s)", gw, strings.Join(subnets, ", "))
		}
	}
	return specs, nil
}

// whereaboutsRange decodes one whereabouts range found at path. "range" is a
// CIDR ("10.0.0.0/24"; host bits are ignored, as whereabouts does) or
// "start-end/prefixlen" ("10.0.0.10-10.0.0.20/24").
func whereaboutsRange(rw rawWhereaboutsRange, path string, set int) (*rangeSpec, error) {
	rangeKey := path + ".range"
	s := &rangeSpec{set: set, name: rangeKey, subnetKey: rangeKey, startKey: rangeKey, endKey: rangeKey,
		gatewayKey: "ipam.gateway"}
	if path != "ipam" {
		s.name = path
	}
	if !present(rw.Range) {
		return nil, invalid(rangeKey, "is missing")
	}
	v, err := str(rw.Range, rangeKey)
	if err != nil {
		return nil, err
	}
	if first, rest, ok := strings.Cut(v, "-"); ok {
		start, err := parseAddr(first, rangeKey)
		if err != nil {
			return nil, err
		}
		p, err := netip.ParsePrefix(rest)
		if err != nil || p.Addr().Is4In6() {
			return nil, invalid(rangeKey, "%s is not start-end/prefixlen: %s is not an address with a prefix length", quote(v), quote(rest))
		}
		s.r.Subnet, s.r.RangeStart, s.r.RangeEnd = p.Masked(), start, p.Addr()
		if start.BitLen() != p.Addr().BitLen() || !s.r.Subnet.Contains(start) {
			return nil, invalid(rangeKey, "start %q is outside %s", start, s.r.Subnet)
		}
	} else if s.r.Subnet, err = parseCIDR(v, rangeKey); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		raw      json.RawMessage
		key      string
		dst      *netip.Addr
		dstKey   *string
		fromDash string
	}{{rw.RangeStart, path + ".range_start", &s.r.RangeStart, &s.startKey, "start"},
		{rw.RangeEnd, path + ".range_end", &s.r.RangeEnd, &s.endKey, "end"}} {
		if !present(f.raw) {
			continue
		}
		v, err := str(f.raw, f.key)
		if err != nil {
			return nil, err
		}
		a, err := parseAddr(v, f.key)
		if err != nil {
			return nil, err
		}
		if f.dst.IsValid() && *f.dst != a {
			return nil, invalid(f.key, "%q conflicts with the %s %q given in %s", a, f.fromDash, *f.dst, rangeKey)
		}
		*f.dst, *f.dstKey = a, f.key
	}
	if present(rw.Exclude) {
		if s.exclude, err = excludes(rw.Exclude, path+".exclude"); err != nil {
			return nil, err
		}
	}
	return s, nil
}
