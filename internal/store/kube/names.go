package kube

import (
	"crypto/sha256"
	"encoding/base32"
	"net/netip"
	"strings"
)

// Object names. Kubernetes names objects by DNS-1123 subdomains (lowercase
// alphanumerics, '-' and '.', at most 253 bytes, every dot-separated label
// starting and ending with an alphanumeric); pool names may hold ':', '_'
// and uppercase ("fd00::-64"), node names anything but '/'. Every name is
// mapped legally and injectively:
//
//   - a legal name maps to itself, unless it looks like a hashed name;
//   - any other name maps to a readable sanitized form, "--" and 16
//     base32 characters of its SHA-256 ("Pool_A" → "pool-a--<hash>").
//
// A hashed name always ends in hashSuffixLen characters of [a-z2-7]
// after "--", and no name mapped to itself does, so the two kinds never
// meet; two hashed names meet only when 80 bits of SHA-256 collide — and
// since the real name is in every object's spec and checked on read, even
// then no read returns another object (it reports the collision).
//
// With a Prefix, every object name is "<prefix>.<mapped>", the mapped part
// getting 253 - len(prefix) - 1 bytes.

const (
	maxObjectName = 253
	maxLabelValue = 63
	// hashChars is how many base32 characters of SHA-256 a hashed name
	// carries (80 bits).
	hashChars = 16
	// hashSep separates a hashed name's readable part from its hash.
	hashSep = "--"
	// claimSep separates a claim name's pool part from its CIDR part.
	claimSep = "."
)

var b32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// hashOf returns hashChars base32 characters of SHA-256 of the parts,
// each length-prefixed so that ("ab","c") and ("a","bc") differ.
func hashOf(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		var n [4]byte
		l := len(p)
		n[0], n[1], n[2], n[3] = byte(l>>24), byte(l>>16), byte(l>>8), byte(l)
		h.Write(n[:])
		h.Write([]byte(p))
	}
	return b32.EncodeToString(h.Sum(nil))[:hashChars]
}

// looksHashed reports whether s ends like a hashed name: "--" and
// hashChars characters of [a-z2-7].
func looksHashed(s string) bool {
	if len(s) < len(hashSep)+hashChars || !strings.HasSuffix(s[:len(s)-hashChars], hashSep) {
		return false
	}
	for _, c := range s[len(s)-hashChars:] {
		if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }

// isSubdomain reports whether s is a DNS-1123 subdomain of at most max
// bytes.
func isSubdomain(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || !isAlnum(label[0]) || !isAlnum(label[len(label)-1]) {
			return false
		}
		for i := range len(label) {
			if c := label[i]; !isAlnum(c) && c != '-' {
				return false
			}
		}
	}
	return true
}

// IsDNSLabel reports whether s is a DNS-1123 label (at most 63 bytes of
// lowercase alphanumerics and '-', starting and ending with an
// alphanumeric): what a Prefix must be.
func IsDNSLabel(s string) bool {
	return len(s) <= maxLabelValue && isSubdomain(s, maxLabelValue) && !strings.Contains(s, ".")
}

// sanitize returns a readable form of s made of [a-z0-9-] only, starting
// and ending with an alphanumeric, at most max bytes (max >= 1): lowercase,
// every other byte becomes '-', runs cut at both ends. An s with nothing
// readable gives "x".
func sanitize(s string, max int) string {
	b := make([]byte, 0, min(len(s), max))
	for i := 0; i < len(s) && len(b) < max; i++ {
		c := s[i]
		switch {
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		case isAlnum(c):
		default:
			c = '-'
		}
		b = append(b, c)
	}
	out := strings.Trim(string(b), "-")
	if out == "" {
		return "x"
	}
	return out
}

// hashed is the hashed form of name, at most max bytes: sanitized readable
// part, "--", hash.
func hashed(max int, parts ...string) string {
	room := max - len(hashSep) - hashChars
	return sanitize(strings.Join(parts, "."), room) + hashSep + hashOf(parts...)
}

// mapName maps a pool or node name (valid for store.ValidName) to the
// object name part of at most max bytes.
func mapName(name string, max int) string {
	if isSubdomain(name, max) && !looksHashed(name) {
		return name
	}
	return hashed(max, name)
}

// cidrName is a readable, injective name part for a block: IPv4
// "10.0.0.0/26" → "10-0-0-0-26"; IPv6 "fd00:22::40/122" →
// "fd00-22--40-122", a leading '-' (from "::") getting a '0' before it
// ("::/122" → "0---122"); an IPv4-mapped IPv6 prefix, whose text holds
// dots, in the expanded form ("0000-0000-0000-0000-0000-ffff-0a00-0000-120").
// Injective: the last '-' is the '/'; IPv4 has 5 non-empty decimal parts,
// compressed IPv6 either an empty part ("::") or 9 parts without leading
// zeros, expanded IPv6 9 parts of four hex digits starting "0000" (and
// netip never writes "0::"). parseCIDRName (tests) inverts it.
func cidrName(p netip.Prefix) string {
	a := p.Addr()
	var s string
	switch {
	case a.Is4():
		s = strings.ReplaceAll(a.String(), ".", "-")
	case a.Is4In6():
		s = strings.ReplaceAll(a.StringExpanded(), ":", "-")
	default:
		s = strings.ReplaceAll(a.String(), ":", "-")
	}
	if strings.HasPrefix(s, "-") {
		s = "0" + s
	}
	return s + "-" + itoa(p.Bits())
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for ; n > 0; n /= 10 {
		i--
		b[i] = byte('0' + n%10)
	}
	return string(b[i:])
}

// namer maps the contract's names to object names and label values of one
// partition.
type namer struct {
	// prefix is the partition ("" for none), a DNS label.
	prefix string
}

// room is how many bytes a mapped name may take after the prefix.
func (n namer) room() int {
	if n.prefix == "" {
		return maxObjectName
	}
	return maxObjectName - len(n.prefix) - 1
}

func (n namer) full(mapped string) string {
	if n.prefix == "" {
		return mapped
	}
	return n.prefix + "." + mapped
}

// object returns the object name of a pool or node name.
func (n namer) object(name string) string { return n.full(mapName(name, n.room())) }

// claim returns the object name of a claim: "<pool part>.<cidr part>",
// the pool part being the pool's mapped name; hashed (with no dot in it,
// so never equal to a readable one) when that is too long.
func (n namer) claim(pool string, cidr netip.Prefix) string {
	room := n.room()
	readable := mapName(pool, room) + claimSep + cidrName(cidr)
	if len(readable) <= room && !looksHashed(readable) {
		return n.full(readable)
	}
	return n.full(hashed(room, pool, cidr.String()))
}

// labelValue returns a label value (at most 63 bytes) standing for a pool
// or node name: the name when it is a legal label value that does not look
// hashed, else its hashed form. Readers filter by content, so a label
// shared by two names only costs a longer list.
func labelValue(name string) string {
	if isLabelValue(name) && !looksHashed(name) {
		return name
	}
	return hashed(maxLabelValue, name)
}

// isLabelValue reports whether s is a non-empty Kubernetes label value
// that is also a legal label key name part: at most 63 bytes of
// alphanumerics (either case), '-', '_' and '.', starting and ending with
// an alphanumeric.
func isLabelValue(s string) bool {
	if s == "" || len(s) > maxLabelValue {
		return false
	}
	an := func(c byte) bool { return isAlnum(c) || c >= 'A' && c <= 'Z' }
	if !an(s[0]) || !an(s[len(s)-1]) {
		return false
	}
	for i := range len(s) {
		if c := s[i]; !an(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}
