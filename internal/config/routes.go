package config

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
)

// rawRoute is one route object (CNI types.Route, including CNI 1.1 attributes).
type rawRoute struct {
	Dst      json.RawMessage `json:"dst"`
	GW       json.RawMessage `json:"gw"`
	MTU      json.RawMessage `json:"mtu"`
	AdvMSS   json.RawMessage `json:"advmss"`
	Priority json.RawMessage `json:"priority"`
	Table    json.RawMessage `json:"table"`
	Scope    json.RawMessage `json:"scope"`
}

// routes decodes a list of routes found at key.
func routes(raw json.RawMessage, key string) ([]Route, error) {
	l, err := boundedList(raw, key, MaxRoutes, "routes")
	if err != nil {
		return nil, err
	}
	out := make([]Route, 0, len(l))
	for i, el := range l {
		rkey := fmt.Sprintf("%s[%d]", key, i)
		var rr rawRoute
		if err := object(el, rkey, &rr); err != nil {
			return nil, err
		}
		var r Route
		if !present(rr.Dst) {
			return nil, invalid(rkey+".dst", "is missing")
		}
		dst, err := str(rr.Dst, rkey+".dst")
		if err != nil {
			return nil, err
		}
		if r.Dst, err = parseCIDR(dst, rkey+".dst"); err != nil {
			return nil, err
		}
		if present(rr.GW) {
			gw, err := str(rr.GW, rkey+".gw")
			if err != nil {
				return nil, err
			}
			if r.GW, err = parseAddr(gw, rkey+".gw"); err != nil {
				return nil, err
			}
			if r.GW.BitLen() != r.Dst.Addr().BitLen() {
				return nil, invalid(rkey+".gw", "%q is %s but dst %s is %s", r.GW, family(r.GW), r.Dst, family(r.Dst.Addr()))
			}
		}
		for _, f := range []struct {
			raw  json.RawMessage
			name string
			dst  *int
		}{{rr.MTU, "mtu", &r.MTU}, {rr.AdvMSS, "advmss", &r.AdvMSS}, {rr.Priority, "priority", &r.Priority}} {
			if present(f.raw) {
				if *f.dst, err = nonNegative(f.raw, rkey+"."+f.name); err != nil {
					return nil, err
				}
			}
		}
		for _, f := range []struct {
			raw  json.RawMessage
			name string
			dst  **int
		}{{rr.Table, "table", &r.Table}, {rr.Scope, "scope", &r.Scope}} {
			if present(f.raw) {
				v, err := nonNegative(f.raw, rkey+"."+f.name)
				if err != nil {
					return nil, err
				}
				*f.dst = &v
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// nonNegative decodes a non-negative integer.
func nonNegative(raw json.RawMessage, key string) (int, error) {
	v, err := integer(raw, key)
	if err != nil {
		return 0, err
	}
	if v < 0 {
		return 0, invalid(key, "%d must not be negative", v)
	}
	return v, nil
}

// rawDNS is a CNI DNS object.
type rawDNS struct {
	Nameservers json.RawMessage `json:"nameservers"`
	Domain      json.RawMessage `json:"domain"`
	Search      json.RawMessage `json:"search"`
	Options     json.RawMessage `json:"options"`
}

// dns reads ipam.resolvConf (as host-local does) and then ipam.dns, whose
// given fields replace those read from the file.
func dns(ri *rawIPAM, env environment) (DNS, error) {
	var d DNS
	if present(ri.ResolvConf) {
		path, err := str(ri.ResolvConf, "ipam.resolvConf")
		if err != nil {
			return DNS{}, err
		}
		if path == "" {
			return DNS{}, invalid("ipam.resolvConf", "is empty")
		}
		data, err := env.readFile(path)
		if err != nil {
			return DNS{}, invalid("ipam.resolvConf", "%s cannot be read: %v", quote(path), err)
		}
		d = parseResolvConf(data)
	}
	if !present(ri.DNS) {
		return d, nil
	}
	var rd rawDNS
	if err := object(ri.DNS, "ipam.dns", &rd); err != nil {
		return DNS{}, err
	}
	var err error
	if present(rd.Nameservers) {
		if d.Nameservers, err = boundedStrList(rd.Nameservers, "ipam.dns.nameservers", MaxDNSEntries); err != nil {
			return DNS{}, err
		}
		for i, ns := range d.Nameservers {
			if _, err := netip.ParseAddr(ns); err != nil {
				return DNS{}, invalid(fmt.Sprintf("ipam.dns.nameservers[%d]", i), "%s is not an IP address", quote(ns))
			}
		}
	}
	if present(rd.Domain) {
		if d.Domain, err = str(rd.Domain, "ipam.dns.domain"); err != nil {
			return DNS{}, err
		}
	}
	if present(rd.Search) {
		if d.Search, err = boundedStrList(rd.Search, "ipam.dns.search", MaxDNSEntries); err != nil {
			return DNS{}, err
		}
	}
	if present(rd.Options) {
		if d.Options, err = boundedStrList(rd.Options, "ipam.dns.options", MaxDNSEntries); err != nil {
			return DNS{}, err
		}
	}
	return d, nil
}

// parseResolvConf reads nameserver, domain, search and options lines the way
// host-local does: comments start with '#' or ';', other keywords are skipped.
func parseResolvConf(data []byte) DNS {
	var d DNS
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxNamedFile)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "nameserver":
			d.Nameservers = append(d.Nameservers, f[1])
		case "domain":
			d.Domain = f[1]
		case "search":
			d.Search = append(d.Search, f[1:]...)
		case "options":
			d.Options = append(d.Options, f[1:]...)
		}
	}
	return d
}
