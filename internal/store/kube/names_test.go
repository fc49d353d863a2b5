package kube

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// parseCIDRName inverts cidrName: the last '-' is the '/', "0--" at the
// start was "::", four decimal parts are IPv4, anything else IPv6 with
// '-' for ':'. That it inverts cidrName (checked below and fuzzed) is
// what makes cidrName injective.
func parseCIDRName(s string) (netip.Prefix, bool) {
	i := strings.LastIndexByte(s, '-')
	if i < 0 {
		return netip.Prefix{}, false
	}
	addr, bits := s[:i], s[i+1:]
	if parts := strings.Split(addr, "-"); len(parts) == 4 && !strings.Contains(addr, "--") && !strings.HasPrefix(addr, "-") && !strings.HasSuffix(addr, "-") && strings.IndexFunc(addr, func(r rune) bool { return r != '-' && (r < '0' || r > '9') }) < 0 {
		addr = strings.Join(parts, ".")
	} else {
		if strings.HasPrefix(addr, "0--") {
			addr = addr[1:]
		}
		addr = strings.ReplaceAll(addr, "-", ":")
	}
	p, err := netip.ParsePrefix(addr + "/" + bits)
	return p, err == nil
}

func TestClaimNames(t *testing.T) {
	long := strings.Repeat("a", 250)
	for _, c := range []struct {
		prefix, pool, cidr, want string
	}{
		{"", "blue", "10.0.0.64/26", "blue.10-0-0-64-26"},
		{"", "blue6", "fd00:22::40/122", "blue6.fd00-22--40-122"},
		{"", "blue", "0.0.0.0/0", "blue.0-0-0-0-0"},
		{"", "blue6", "::/122", "blue6.0---122"},
		{"", "blue6", "::1/128", "blue6.0--1-128"},
		{"", "blue6", "fd00::/64", "blue6.fd00---64"},
		{"", "blue6", "2001:db8:1:2:3:4:5:0/127", "blue6.2001-db8-1-2-3-4-5-0-127"},
		{"", "mapped", "::ffff:10.0.0.0/120", "mapped.0000-0000-0000-0000-0000-ffff-0a00-0000-120"},
		{"t1", "blue", "10.0.0.64/26", "t1.blue.10-0-0-64-26"},
		{"", "fd00::-64", "fd00::/122", "fd00---64--" + hashOf("fd00::-64") + ".fd00---122"},
		{"", "Pool_A", "192.168.1.0/24", "pool-a--" + hashOf("Pool_A") + ".192-168-1-0-24"},
	} {
		t.Run(c.pool+" "+c.cidr, func(t *testing.T) {
			p := netip.MustParsePrefix(c.cidr)
			got := namer{c.prefix}.claim(c.pool, p)
			if got != c.want {
				t.Errorf("claim name %q, want %q", got, c.want)
			}
			if !isSubdomain(got, maxObjectName) {
				t.Errorf("claim name %q is not a DNS-1123 subdomain", got)
			}
			back, ok := parseCIDRName(cidrName(p))
			if !ok || back != p {
				t.Errorf("parseCIDRName(%q) = %v %v, want %v", cidrName(p), back, ok, p)
			}
		})
	}
	// Too long for a readable name: hashed, no dot, at most 253 bytes, and
	// distinct per CIDR.
	a := namer{"t1"}.claim(long, netip.MustParsePrefix("10.0.0.0/26"))
	b := namer{"t1"}.claim(long, netip.MustParsePrefix("10.0.0.64/26"))
	for _, n := range []string{a, b} {
		if len(n) > maxObjectName || !isSubdomain(n, maxObjectName) || strings.Contains(strings.TrimPrefix(n, "t1."), ".") || !looksHashed(n) {
			t.Errorf("long claim name %q (%d bytes): want a hashed subdomain of at most 253 bytes", n, len(n))
		}
	}
	if a == b {
		t.Errorf("two blocks of a long-named pool share the claim name %q", a)
	}
}

func TestObjectNames(t *testing.T) {
	at253 := strings.Repeat("abcdefghi.", 25) + "abc" // 253 bytes, legal
	for _, c := range []struct {
		prefix, name string
		same         bool // maps to itself (after the prefix)
	}{
		{"", "blue", true},
		{"", "node-1.example.com", true},
		{"", at253, true},
		{"t1", at253, false}, // 250 bytes of room
		{"", "fd00::-64", false},
		{"", "Pool_A", false},
		{"", "pool-a", true},
		{"", "pool.a", true},
		{"", "-a", false},
		{"", "a..b", false},
		{"", "ünïcode", false},
		{"", "x--abcdefghijklmnop", false}, // legal, but looks hashed
		{"", "x--abcdefghijklmno1", true},  // '1' is not base32: not hashed-looking
		{"", strings.Repeat("Z", 253), false},
	} {
		name := c.name
		if len(name) > 20 {
			name = name[:20] + "…"
		}
		t.Run(name, func(t *testing.T) {
			n := namer{c.prefix}
			got := n.object(c.name)
			if !isSubdomain(got, maxObjectName) {
				t.Fatalf("object name %q is not a DNS-1123 subdomain of at most 253 bytes", got)
			}
			mapped := got
			if c.prefix != "" {
				if !strings.HasPrefix(got, c.prefix+".") {
					t.Fatalf("object name %q lacks the prefix %q", got, c.prefix)
				}
				mapped = strings.TrimPrefix(got, c.prefix+".")
			}
			if (mapped == c.name) != c.same {
				t.Errorf("object name %q for %q: maps to itself %v, want %v", got, c.name, mapped == c.name, c.same)
			}
			if !c.same && !looksHashed(mapped) {
				t.Errorf("object name %q for %q: not the name and not hashed", got, c.name)
			}
		})
	}
	// Names whose readable forms are the same are distinct objects.
	seen := map[string]string{}
	for _, name := range []string{"pool-a", "Pool_A", "pool:a", "POOL-A", "pool a", "pool-a--" + hashOf("Pool_A")} {
		o := namer{}.object(name)
		if other, dup := seen[o]; dup {
			t.Errorf("%q and %q both map to %q", name, other, o)
		}
		seen[o] = name
	}
}

func TestLabelValues(t *testing.T) {
	long := strings.Repeat("n", 64)
	for _, c := range []struct {
		name string
		same bool
	}{
		{"node-1", true},
		{"Node_1.example", true},
		{strings.Repeat("n", 63), true},
		{long, false},
		{"fd00::-64", false},
		{"-x", false},
		{"x--abcdefghijklmnop", false},
	} {
		got := labelValue(c.name)
		if !isLabelValue(got) {
			t.Errorf("labelValue(%q) = %q is not a label value", c.name, got)
		}
		if (got == c.name) != c.same {
			t.Errorf("labelValue(%q) = %q: same %v, want %v", c.name, got, got == c.name, c.same)
		}
	}
	if labelValue(long) == labelValue(long+"x") {
		t.Errorf("two long names share a label value")
	}
}

// FuzzNames: every name valid for the contract maps to a legal object name
// and label value, distinct names to distinct ones, and every block to a
// claim name parseCIDRName inverts.
func FuzzNames(f *testing.F) {
	f.Add("blue", "Blue", "t1", []byte{10, 0, 0, 0}, uint8(26))
	f.Add("fd00::-64", "fd00---64", "", []byte{0xfd, 0, 0, 0x22, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x40}, uint8(122))
	f.Add("x--abcdefghijklmnop", "x--abcdefghijklmnoq", "p", []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 0}, uint8(120))
	f.Add(strings.Repeat("a", 253), strings.Repeat("a", 252)+"A", "zz", []byte{1, 2, 3, 4}, uint8(32))
	f.Fuzz(func(t *testing.T, a, b, prefix string, addr []byte, bits uint8) {
		if prefix != "" && !IsDNSLabel(prefix) {
			prefix = "p"
		}
		n := namer{prefix}
		for _, name := range []string{a, b} {
			if validName(name) {
				if o := n.object(name); !isSubdomain(o, maxObjectName) {
					t.Fatalf("object(%q) = %q is not a DNS-1123 subdomain of at most 253 bytes", name, o)
				}
				if l := labelValue(name); !isLabelValue(l) {
					t.Fatalf("labelValue(%q) = %q is not a label value", name, l)
				}
			}
		}
		if validName(a) && validName(b) && a != b {
			if n.object(a) == n.object(b) {
				t.Fatalf("%q and %q map to one object name %q", a, b, n.object(a))
			}
			if labelValue(a) == labelValue(b) {
				t.Fatalf("%q and %q map to one label value %q", a, b, labelValue(a))
			}
		}
		ip, ok := netip.AddrFromSlice(addr)
		if !ok || !validName(a) {
			return
		}
		p, err := ip.Prefix(int(bits) % (ip.BitLen() + 1))
		if err != nil {
			t.Fatal(err)
		}
		cn := n.claim(a, p)
		if !isSubdomain(cn, maxObjectName) {
			t.Fatalf("claim(%q, %v) = %q is not a DNS-1123 subdomain of at most 253 bytes", a, p, cn)
		}
		if back, ok := parseCIDRName(cidrName(p)); !ok || back != p {
			t.Fatalf("cidrName(%v) = %q parses back as %v %v", p, cidrName(p), back, ok)
		}
		if validName(b) && a != b && n.claim(b, p) == cn {
			t.Fatalf("claims of %v in pools %q and %q share the name %q", p, a, b, cn)
		}
		if q, err := ip.Prefix(max(int(bits)%(ip.BitLen()+1)-1, 0)); err == nil && q != p && n.claim(a, q) == cn {
			t.Fatalf("claims of %v and %v in pool %q share the name %q", p, q, a, cn)
		}
	})
}

func validName(s string) bool { return store.ValidName("name", s) == nil }
