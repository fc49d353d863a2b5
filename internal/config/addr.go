package config

import (
	"net/netip"
	"strings"
)

// parseAddr parses an IP address; IPv4-mapped IPv6 addresses become IPv4,
// as host-local canonicalizes them. Zones are rejected.
func parseAddr(s, key string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, invalid(key, "%s is not an IP address", quote(s))
	}
	if a.Zone() != "" {
		return netip.Addr{}, invalid(key, "%s must not carry an IPv6 zone", quote(s))
	}
	return a.Unmap(), nil
}

// parseCIDR parses a CIDR and masks it ("10.1.2.3/24" is 10.1.2.0/24).
func parseCIDR(s, key string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, invalid(key, "%s is not a CIDR", quote(s))
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, invalid(key, "%s is an IPv4-mapped IPv6 CIDR; write it as an IPv4 CIDR", quote(s))
	}
	return p.Masked(), nil
}

// parseExclude parses an exclude entry: a CIDR, or (as whereabouts accepts)
// a single address meaning /32 or /128.
func parseExclude(s, key string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
			a = a.Unmap()
			return netip.PrefixFrom(a, a.BitLen()), nil
		}
	}
	return parseCIDR(s, key)
}

// family names the IP family of a for messages.
func family(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}
