package store

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Every backend stores a handle record as one string (FormatRecord), not
// as a JSON object: it is shorter, faster to read and write, and on the
// Kubernetes API, which decodes, prunes, validates and re-encodes every
// field of a custom resource on every write, one field instead of ten.
// A record reads
//
//	<id> <addr>@<pool>[,<addr>@<pool>...] [node=<n>] [att=<network>/<container>/<ifname>] [netns=<path>] [ns=<namespace>] [pod=<name>] [uid=<uid>] [at=<RFC 3339 time>] [sticky=<kind>/<namespace>/<name>] [parked=<RFC 3339 time>]
//
// fields separated by one space, the optional ones in that order and
// only when set (as HandleSpec's JSON omits them). Bytes that would
// end a field — space, '%', control and non-ASCII bytes everywhere, ','
// and '@' in a pool, '/' in an attachment's parts — are written as %XX.
//
// e.g. "blue-net.8f3a.eth0 10.0.0.5@blue,fd00::5@blue6 ns=default pod=web-0 uid=7c1d at=2026-11-27T03:20:00Z"

// ErrRecord is wrapped by every ParseRecord error.
var ErrRecord = errors.New("bad handle record")

// Record keys, in the order a record writes them.
const (
	keyNode   = "node"
	keyAtt    = "att"
	keyNetNS  = "netns"
	keyNS     = "ns"
	keyPod    = "pod"
	keyUID    = "uid"
	keyAt     = "at"
	keySticky = "sticky"
	keyParked = "parked"
)

var recordKeys = []string{keyNode, keyAtt, keyNetNS, keyNS, keyPod, keyUID, keyAt, keySticky, keyParked}

// FormatRecord writes h as one record string.
func FormatRecord(h *HandleSpec) string {
	var b strings.Builder
	b.Grow(len(h.ID) + len(h.NetNS) + len(h.Namespace) + len(h.Pod) + len(h.PodUID) + 48*len(h.IPs) + 48)
	escapeTo(&b, h.ID, "")
	b.WriteByte(' ')
	for i, ip := range h.IPs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(ip.Addr.String())
		b.WriteByte('@')
		escapeTo(&b, ip.Pool, ",@")
	}
	field := func(key, value string, special string) {
		if value == "" {
			return
		}
		b.WriteByte(' ')
		b.WriteString(key)
		b.WriteByte('=')
		escapeTo(&b, value, special)
	}
	field(keyNode, h.Node, "")
	if a := h.Attachment; a != nil {
		b.WriteString(" " + keyAtt + "=")
		for i, part := range a {
			if i > 0 {
				b.WriteByte('/')
			}
			escapeTo(&b, part, "/")
		}
	}
	field(keyNetNS, h.NetNS, "")
	field(keyNS, h.Namespace, "")
	field(keyPod, h.Pod, "")
	field(keyUID, h.PodUID, "")
	if !h.Created.IsZero() {
		field(keyAt, h.Created.Format(time.RFC3339Nano), "")
	}
	field(keySticky, h.Sticky, "")
	if !h.Parked.IsZero() {
		field(keyParked, h.Parked.Format(time.RFC3339Nano), "")
	}
	return b.String()
}

// ParseRecord reads what FormatRecord writes.
func ParseRecord(s string) (HandleSpec, error) {
	bad := func(format string, args ...any) (HandleSpec, error) {
		return HandleSpec{}, fmt.Errorf("%w %q: %s", ErrRecord, s, fmt.Sprintf(format, args...))
	}
	id, rest, ok := strings.Cut(s, " ")
	if !ok {
		return bad("want an ID and addresses")
	}
	ips, rest, more := strings.Cut(rest, " ")
	var h HandleSpec
	var err error
	if h.ID, err = unescape(id); err != nil || h.ID == "" {
		return bad("handle ID: %v", orEmpty(err))
	}
	h.IPs = make([]AddrSpec, 0, strings.Count(ips, ",")+1)
	for ip := range strings.SplitSeq(ips, ",") {
		addr, pool, ok := strings.Cut(ip, "@")
		if !ok {
			return bad("address %q: want <addr>@<pool>", ip)
		}
		a, err := netip.ParseAddr(addr)
		if err != nil || a.Zone() != "" {
			return bad("address %q: not an IP address", addr)
		}
		p, err := unescape(pool)
		if err != nil || p == "" {
			return bad("pool of %s: %v", addr, orEmpty(err))
		}
		h.IPs = append(h.IPs, AddrSpec{Addr: a, Pool: p})
	}
	next := 0 // index in recordKeys of the next key allowed
	for more {
		var f string
		f, rest, more = strings.Cut(rest, " ")
		key, raw, ok := strings.Cut(f, "=")
		i := indexFrom(recordKeys, next, key)
		if !ok || i < 0 {
			return bad("field %q: want one of %s once each, in that order", f, strings.Join(recordKeys, ", "))
		}
		next = i + 1
		if key == keyAtt {
			parts := strings.Split(raw, "/")
			if len(parts) != 3 {
				return bad("att %q: want <network>/<container>/<ifname>", raw)
			}
			var a [3]string
			for j, p := range parts {
				if a[j], err = unescape(p); err != nil {
					return bad("att: %v", err)
				}
			}
			h.Attachment = &a
			continue
		}
		v, err := unescape(raw)
		if err != nil || v == "" {
			return bad("%s: %v", key, orEmpty(err))
		}
		switch key {
		case keyNode:
			h.Node = v
		case keyNetNS:
			h.NetNS = v
		case keyNS:
			h.Namespace = v
		case keyPod:
			h.Pod = v
		case keyUID:
			h.PodUID = v
		case keyAt:
			if h.Created, err = time.Parse(time.RFC3339Nano, v); err != nil {
				return bad("at: %v", err)
			}
		case keySticky:
			h.Sticky = v
		case keyParked:
			if h.Parked, err = time.Parse(time.RFC3339Nano, v); err != nil {
				return bad("parked: %v", err)
			}
		}
	}
	return h, nil
}

func orEmpty(err error) error {
	if err == nil {
		return errors.New("empty")
	}
	return err
}

func indexFrom(keys []string, from int, key string) int {
	for i := from; i < len(keys); i++ {
		if keys[i] == key {
			return i
		}
	}
	return -1
}

// escapeTo writes s with every byte that could end a field, and those in
// special, as %XX.
func escapeTo(b *strings.Builder, s, special string) {
	const hex = "0123456789ABCDEF"
	start := 0 // the first byte not written yet
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c > ' ' && c < 0x7f && c != '%' && strings.IndexByte(special, c) < 0 {
			continue
		}
		b.WriteString(s[start:i])
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
		start = i + 1
	}
	b.WriteString(s[start:])
}

// unescape reads what escapeTo writes (any %XX, upper or lower case).
func unescape(s string) (string, error) {
	if strings.IndexByte(s, '%') < 0 {
		return s, nil
	}
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			out = append(out, s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("%q: %% without two hex digits", s)
		}
		hi, ok1 := unhex(s[i+1])
		lo, ok2 := unhex(s[i+2])
		if !ok1 || !ok2 {
			return "", fmt.Errorf("%q: %% without two hex digits", s)
		}
		out = append(out, hi<<4|lo)
		i += 2
	}
	return string(out), nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
