package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
)

// Attachment is one entry of a CNI GC call's list of valid attachments.
type Attachment struct {
	ContainerID string
	IfName      string
}

// The keys a CNI GC call lists valid attachments under: the spec's, and
// the one the tagged CNI 1.1.0 text named (libcni >= 1.2.3 sends both).
const (
	ValidAttachmentsKey       = "cni.dev/valid-attachments"
	LegacyValidAttachmentsKey = "cni.dev/attachments"
)

// GCAttachments reads the valid attachments of a CNI GC call from the
// netconf: ValidAttachmentsKey and LegacyValidAttachmentsKey, the union of
// both when both are given. An empty list is valid (nothing is in use).
// Neither key, a null, a value that is not a list, or an entry without a
// valid containerID and ifname is an error wrapping ErrInvalid: a GC that
// cannot tell what is in use must release nothing.
func GCAttachments(netconf []byte) ([]Attachment, error) {
	if err := checkSize(netconf); err != nil {
		return nil, err
	}
	var top struct {
		Valid  json.RawMessage `json:"cni.dev/valid-attachments"`
		Legacy json.RawMessage `json:"cni.dev/attachments"`
	}
	if err := unmarshalDocument(netconf, &top); err != nil {
		return nil, err
	}
	if top.Valid == nil && top.Legacy == nil {
		return nil, invalid(ValidAttachmentsKey, "is missing (and so is %s): without the list of attachments still in use "+
			"a GC would release every allocation of this network on this node; send the list (an empty list means none is in use)",
			LegacyValidAttachmentsKey)
	}
	var out []Attachment
	seen := map[Attachment]bool{}
	for _, f := range []struct {
		key string
		raw json.RawMessage
	}{{ValidAttachmentsKey, top.Valid}, {LegacyValidAttachmentsKey, top.Legacy}} {
		if f.raw == nil {
			continue
		}
		l, err := attachments(f.raw, f.key)
		if err != nil {
			return nil, err
		}
		for _, a := range l {
			if !seen[a] {
				seen[a] = true
				out = append(out, a)
			}
		}
	}
	return out, nil
}

// attachments decodes one list of valid attachments found at key.
func attachments(raw json.RawMessage, key string) ([]Attachment, error) {
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil, invalid(key, "is null: send the list of attachments still in use (an empty list means none is)")
	}
	l, err := boundedList(raw, key, MaxAttachments, "attachments")
	if err != nil {
		return nil, err
	}
	out := make([]Attachment, 0, len(l))
	for i, el := range l {
		ekey := fmt.Sprintf("%s[%d]", key, i)
		var ra struct {
			ContainerID json.RawMessage `json:"containerID"`
			IfName      json.RawMessage `json:"ifname"`
		}
		if err := object(el, ekey, &ra); err != nil {
			return nil, err
		}
		var a Attachment
		for _, f := range []struct {
			raw   json.RawMessage
			key   string
			dst   *string
			check func(key, v string) error
		}{{ra.ContainerID, ekey + ".containerID", &a.ContainerID, CheckContainerID}, {ra.IfName, ekey + ".ifname", &a.IfName, CheckIfName}} {
			if !present(f.raw) {
				return nil, invalid(f.key, "is missing")
			}
			if *f.dst, err = str(f.raw, f.key); err != nil {
				return nil, err
			}
			if err := f.check(f.key, *f.dst); err != nil {
				return nil, err
			}
		}
		out = append(out, a)
	}
	return out, nil
}

// RequestedIPs reads the static addresses a runtime asks for in the
// netconf: runtimeConfig.ips (the "ips" capability) and args.cni.ips, in
// that order. Each entry is an address, optionally with a prefix length
// (ignored). A request that cannot be read is an error wrapping ErrInvalid
// that names the key: ignoring it would hand the workload some other
// address.
func RequestedIPs(netconf []byte) ([]netip.Addr, error) {
	if err := checkSize(netconf); err != nil {
		return nil, err
	}
	var top struct {
		RuntimeConfig json.RawMessage `json:"runtimeConfig"`
		Args          json.RawMessage `json:"args"`
	}
	if err := unmarshalDocument(netconf, &top); err != nil {
		return nil, err
	}
	var out []netip.Addr
	if present(top.RuntimeConfig) {
		var rc struct {
			IPs json.RawMessage `json:"ips"`
		}
		if err := object(top.RuntimeConfig, "runtimeConfig", &rc); err != nil {
			return nil, err
		}
		ips, err := ipList(rc.IPs, "runtimeConfig.ips")
		if err != nil {
			return nil, err
		}
		out = append(out, ips...)
	}
	if present(top.Args) {
		var args struct {
			CNI json.RawMessage `json:"cni"`
		}
		if err := object(top.Args, "args", &args); err != nil {
			return nil, err
		}
		if present(args.CNI) {
			var cni struct {
				IPs json.RawMessage `json:"ips"`
			}
			if err := object(args.CNI, "args.cni", &cni); err != nil {
				return nil, err
			}
			ips, err := ipList(cni.IPs, "args.cni.ips")
			if err != nil {
				return nil, err
			}
			out = append(out, ips...)
		}
	}
	if len(out) > MaxRangeSets {
		return nil, tooMany("runtimeConfig.ips and args.cni.ips", len(out), MaxRangeSets, "addresses (one per range set)")
	}
	return out, nil
}

// ipList decodes a list of requested addresses at key; absent or null is none.
func ipList(raw json.RawMessage, key string) ([]netip.Addr, error) {
	if !present(raw) {
		return nil, nil
	}
	l, err := list(raw, key)
	if err != nil {
		return nil, invalid(key, "must be a list of IP addresses, not %s", kindOf(raw))
	}
	if len(l) > MaxRangeSets {
		return nil, tooMany(key, len(l), MaxRangeSets, "addresses (one per range set)")
	}
	out := make([]netip.Addr, 0, len(l))
	for i, el := range l {
		ekey := fmt.Sprintf("%s[%d]", key, i)
		s, err := str(el, ekey)
		if err != nil {
			return nil, invalid(ekey, "must be an IP address string, not %s", kindOf(el))
		}
		a, err := ParseRequestedIP(s)
		if err != nil {
			return nil, invalid(ekey, "%s is not an IP address", quote(s))
		}
		out = append(out, a)
	}
	return out, nil
}

// ParseRequestedIP parses a requested address: "10.0.0.5" or
// "10.0.0.5/24" (the prefix length is ignored). IPv4-mapped IPv6 becomes
// IPv4; zones are refused.
func ParseRequestedIP(s string) (netip.Addr, error) {
	s = strings.TrimSpace(s)
	a, err := netip.ParseAddr(s)
	if p, perr := netip.ParsePrefix(s); perr == nil {
		a, err = p.Addr(), nil
	}
	if err != nil {
		return netip.Addr{}, err
	}
	if a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("%q carries an IPv6 zone", s)
	}
	return a.Unmap(), nil
}
