package webui

import (
	"net/netip"
	"strings"
	"testing"
)

// FuzzParseBlockRef: any input is a valid prefix or an error naming it;
// a prefix's or an address's own spelling reads back as itself.
func FuzzParseBlockRef(f *testing.F) {
	for _, s := range []string{"10.0.0.0/26", "10.0.0.0-26", "10.0.0.7", "fd00::/122", "fd00::-122", "fd00::1",
		"", "-", "/", "::/0", "1.2.3.4/33", "fe80::1%eth0", "10.0.0.0-26-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, bare, err := parseBlockRef(s)
		if err != nil {
			if !strings.Contains(err.Error(), "is not a block") {
				t.Fatalf("%q: error %v does not say what is wrong", s, err)
			}
			return
		}
		if !p.IsValid() || p.Addr().Zone() != "" {
			t.Fatalf("%q: parsed to %v", s, p)
		}
		if bare && p.Bits() != p.Addr().BitLen() {
			t.Fatalf("%q: bare address as %v", s, p)
		}
		if q, err := netip.ParsePrefix(strings.TrimSpace(s)); err == nil && (q != p || bare) {
			t.Fatalf("%q: prefix %v read as %v (bare %v)", s, q, p, bare)
		}
	})
}

// FuzzNeedsToken: only loopback hosts are exempt from the token.
func FuzzNeedsToken(f *testing.F) {
	for _, s := range []string{"127.0.0.1:1", "[::1]:1", "localhost:1", ":1", "0.0.0.0:1", "[::]:1", "x:1", "1.2.3.4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		need, err := NeedsToken(s)
		if err != nil || need {
			return
		}
		host := s[:strings.LastIndexByte(s, ':')]
		host = strings.Trim(host, "[]")
		if a, perr := netip.ParseAddr(host); !strings.EqualFold(host, "localhost") && (perr != nil || !a.Unmap().IsLoopback()) {
			t.Fatalf("%q exempt from the token", s)
		}
	})
}
