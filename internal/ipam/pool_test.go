package ipam_test

import (
	"errors"
	"math"
	"net/netip"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

var (
	addr   = netip.MustParseAddr
	prefix = netip.MustParsePrefix
)

// family runs fn as subtests "v4" and "v6" for the variants that are set:
// every table below keeps the IPv4 and IPv6 form of a case on one row.
func family[T any](t *testing.T, v4, v6 *T, fn func(t *testing.T, c T)) {
	t.Helper()
	if v4 != nil {
		t.Run("v4", func(t *testing.T) { fn(t, *v4) })
	}
	if v6 != nil {
		t.Run("v6", func(t *testing.T) { fn(t, *v6) })
	}
}

func pfxs(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, prefix(s))
	}
	return out
}

func TestPoolValidate(t *testing.T) {
	v4 := ipam.Pool{Name: "p4", CIDR: prefix("10.22.0.0/16"), BlockSize: 26,
		RangeStart: addr("10.22.0.10"), RangeEnd: addr("10.22.255.200"), Gateway: addr("10.22.0.1"),
		Exclude: pfxs("10.22.7.0/24")}
	v6 := ipam.Pool{Name: "p6", CIDR: prefix("fd00:22::/64"), BlockSize: 122,
		RangeStart: addr("fd00:22::10"), RangeEnd: addr("fd00:22::ffff"), Gateway: addr("fd00:22::1"),
		Exclude: pfxs("fd00:22::700/120")}
	with := func(p ipam.Pool, f func(*ipam.Pool)) *ipam.Pool { f(&p); return &p }

	tests := []struct {
		name   string
		v4, v6 *ipam.Pool
		want   string // substring of the error; "" means valid
	}{
		{"valid", &v4, &v6, ""},
		{"valid minimal",
			&ipam.Pool{Name: "m4", CIDR: prefix("192.168.0.0/24"), BlockSize: 24},
			&ipam.Pool{Name: "m6", CIDR: prefix("fd00::/120"), BlockSize: 120}, ""},
		{"valid single address block",
			&ipam.Pool{Name: "s4", CIDR: prefix("192.168.0.7/32"), BlockSize: 32},
			&ipam.Pool{Name: "s6", CIDR: prefix("fd00::7/128"), BlockSize: 128}, ""},
		{"valid /31 and /127 point-to-point",
			&ipam.Pool{Name: "s4", CIDR: prefix("192.168.0.6/31"), BlockSize: 31},
			&ipam.Pool{Name: "s6", CIDR: prefix("fd00::6/127"), BlockSize: 127}, ""},
		{"valid largest v6 pool (2^62 blocks)", nil,
			&ipam.Pool{Name: "big", CIDR: prefix("fd00::/60"), BlockSize: 122}, ""},
		{"empty name",
			with(v4, func(p *ipam.Pool) { p.Name = "" }),
			with(v6, func(p *ipam.Pool) { p.Name = "" }), "must be non-empty"},
		{"slash in name",
			with(v4, func(p *ipam.Pool) { p.Name = "a/b" }),
			with(v6, func(p *ipam.Pool) { p.Name = "a/b" }), "contain no '/'"},
		{"cidr missing",
			with(v4, func(p *ipam.Pool) { p.CIDR = netip.Prefix{} }),
			with(v6, func(p *ipam.Pool) { p.CIDR = netip.Prefix{} }), "cidr is not set"},
		{"host bits set",
			with(v4, func(p *ipam.Pool) { p.CIDR = prefix("10.22.3.0/16") }),
			with(v6, func(p *ipam.Pool) { p.CIDR = prefix("fd00:22::5/64") }), "has host bits set"},
		{"IPv4-mapped IPv6", nil,
			&ipam.Pool{Name: "m", CIDR: prefix("::ffff:10.0.0.0/120"), BlockSize: 122}, "plain IPv4 or IPv6"},
		{"block size zero",
			with(v4, func(p *ipam.Pool) { p.BlockSize = 0 }),
			with(v6, func(p *ipam.Pool) { p.BlockSize = 0 }), "not a valid prefix length"},
		{"block size beyond address length",
			with(v4, func(p *ipam.Pool) { p.BlockSize = 33 }),
			with(v6, func(p *ipam.Pool) { p.BlockSize = 129 }), "not a valid prefix length"},
		{"pool smaller than block",
			&ipam.Pool{Name: "p4", CIDR: prefix("10.22.0.0/28"), BlockSize: 26},
			&ipam.Pool{Name: "p6", CIDR: prefix("fd00::/124"), BlockSize: 122}, "smaller than its block size"},
		{"block too large",
			&ipam.Pool{Name: "p4", CIDR: prefix("10.0.0.0/8"), BlockSize: 15},
			with(v6, func(p *ipam.Pool) { p.BlockSize = 100 }), "is too large"},
		{"too many blocks", nil,
			&ipam.Pool{Name: "p6", CIDR: prefix("fd00::/48"), BlockSize: 122}, "more than 2^62 blocks"},
		{"gateway outside",
			with(v4, func(p *ipam.Pool) { p.Gateway = addr("10.23.0.1") }),
			with(v6, func(p *ipam.Pool) { p.Gateway = addr("fd00:23::1") }), "gateway"},
		{"rangeStart outside",
			with(v4, func(p *ipam.Pool) { p.RangeStart = addr("10.21.255.255") }),
			with(v6, func(p *ipam.Pool) { p.RangeStart = addr("fd00:21::1") }), "rangeStart"},
		{"rangeEnd outside",
			with(v4, func(p *ipam.Pool) { p.RangeEnd = addr("10.23.0.0") }),
			with(v6, func(p *ipam.Pool) { p.RangeEnd = addr("fd00:23::") }), "rangeEnd"},
		{"range of the other family",
			with(v4, func(p *ipam.Pool) { p.RangeStart = addr("fd00:22::10") }),
			with(v6, func(p *ipam.Pool) { p.RangeEnd = addr("10.22.0.10") }), "is outside"},
		{"start after end",
			with(v4, func(p *ipam.Pool) { p.RangeStart, p.RangeEnd = addr("10.22.0.200"), addr("10.22.0.100") }),
			with(v6, func(p *ipam.Pool) { p.RangeStart, p.RangeEnd = addr("fd00:22::200"), addr("fd00:22::100") }), "is after rangeEnd"},
		{"exclude of the other family",
			with(v4, func(p *ipam.Pool) { p.Exclude = pfxs("fd00::/64") }),
			with(v6, func(p *ipam.Pool) { p.Exclude = pfxs("10.0.0.0/8") }), "exclude"},
		{"exclude invalid",
			with(v4, func(p *ipam.Pool) { p.Exclude = []netip.Prefix{{}} }),
			with(v6, func(p *ipam.Pool) { p.Exclude = []netip.Prefix{{}} }), "exclude"},
		{"everything excluded",
			&ipam.Pool{Name: "x4", CIDR: prefix("10.0.0.0/28"), BlockSize: 28, Exclude: pfxs("10.0.0.0/28")},
			&ipam.Pool{Name: "x6", CIDR: prefix("fd00::/124"), BlockSize: 124, Exclude: pfxs("fd00::/124")}, "no usable address"},
		{"range is only the gateway",
			&ipam.Pool{Name: "g4", CIDR: prefix("10.0.0.0/29"), BlockSize: 29, RangeStart: addr("10.0.0.1"), RangeEnd: addr("10.0.0.1"), Gateway: addr("10.0.0.1")},
			&ipam.Pool{Name: "g6", CIDR: prefix("fd00::/125"), BlockSize: 125, RangeStart: addr("fd00::1"), RangeEnd: addr("fd00::1"), Gateway: addr("fd00::1")}, "no usable address"},
		{"range is only network and broadcast",
			&ipam.Pool{Name: "n4", CIDR: prefix("10.0.0.0/30"), BlockSize: 30, RangeStart: addr("10.0.0.3"), RangeEnd: addr("10.0.0.3")},
			&ipam.Pool{Name: "n6", CIDR: prefix("fd00::/126"), BlockSize: 126, RangeStart: addr("fd00::"), RangeEnd: addr("fd00::")}, "no usable address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			family(t, tt.v4, tt.v6, func(t *testing.T, p ipam.Pool) {
				err := p.Validate()
				if tt.want == "" {
					if err != nil {
						t.Fatalf("Validate(%+v) = %v, want nil", p, err)
					}
					return
				}
				if err == nil {
					t.Fatalf("Validate(%+v) = nil, want error containing %q", p, tt.want)
				}
				if !errors.Is(err, ipam.ErrInvalidPool) {
					t.Errorf("error %v does not wrap ErrInvalidPool", err)
				}
				if !strings.Contains(err.Error(), tt.want) {
					t.Errorf("error %q does not contain %q", err, tt.want)
				}
				if p.Name != "" && !strings.Contains(err.Error(), p.Name) {
					t.Errorf("error %q does not name the pool %q", err, p.Name)
				}
			})
		})
	}
}

// TestPoolValidateSmallerThanBlockSuggests checks that the message tells
// the user which block size would work.
func TestPoolValidateSmallerThanBlockSuggests(t *testing.T) {
	for _, p := range []ipam.Pool{
		{Name: "a", CIDR: prefix("10.0.0.0/28"), BlockSize: 26},
		{Name: "b", CIDR: prefix("fd00::/124"), BlockSize: 122},
	} {
		err := p.Validate()
		if err == nil || !strings.Contains(err.Error(), "/28") && p.Name == "a" || !strings.Contains(err.Error(), "/124") && p.Name == "b" {
			t.Errorf("Validate(%v) = %v, want a hint naming the pool's own prefix length", p.CIDR, err)
		}
	}
}

func TestPoolPermits(t *testing.T) {
	p4 := ipam.Pool{Name: "p4", CIDR: prefix("10.0.0.0/24"), BlockSize: 28, Gateway: addr("10.0.0.1"),
		RangeStart: addr("10.0.0.10"), RangeEnd: addr("10.0.0.250"), Exclude: pfxs("10.0.0.64/28", "10.0.0.100/32")}
	p6 := ipam.Pool{Name: "p6", CIDR: prefix("fd00::/120"), BlockSize: 124, Gateway: addr("fd00::1"),
		RangeStart: addr("fd00::10"), RangeEnd: addr("fd00::fa"), Exclude: pfxs("fd00::40/124", "fd00::64/128")}
	open4 := ipam.Pool{Name: "o4", CIDR: prefix("10.0.0.0/29"), BlockSize: 29}
	open6 := ipam.Pool{Name: "o6", CIDR: prefix("fd00::/125"), BlockSize: 125}
	ptp4 := ipam.Pool{Name: "t4", CIDR: prefix("10.0.0.6/31"), BlockSize: 31}
	ptp6 := ipam.Pool{Name: "t6", CIDR: prefix("fd00::6/127"), BlockSize: 127}
	one4 := ipam.Pool{Name: "h4", CIDR: prefix("10.0.0.9/32"), BlockSize: 32}
	one6 := ipam.Pool{Name: "h6", CIDR: prefix("fd00::9/128"), BlockSize: 128}

	type c struct {
		pool ipam.Pool
		a    string
		want bool
	}
	tests := []struct {
		name   string
		v4, v6 *c
	}{
		{"network address", &c{open4, "10.0.0.0", false}, &c{open6, "fd00::", false}},
		{"first host", &c{open4, "10.0.0.1", true}, &c{open6, "fd00::1", true}},
		{"broadcast only in IPv4", &c{open4, "10.0.0.7", false}, &c{open6, "fd00::7", true}},
		{"outside the cidr", &c{open4, "10.0.0.8", false}, &c{open6, "fd00::8", false}},
		{"other family", &c{open4, "::a00:1", false}, &c{open6, "10.0.0.1", false}},
		{"IPv4-mapped form", &c{open4, "::ffff:10.0.0.1", false}, nil},
		{"gateway", &c{p4, "10.0.0.1", false}, &c{p6, "fd00::1", false}},
		{"below rangeStart", &c{p4, "10.0.0.9", false}, &c{p6, "fd00::f", false}},
		{"rangeStart", &c{p4, "10.0.0.10", true}, &c{p6, "fd00::10", true}},
		{"rangeEnd", &c{p4, "10.0.0.250", true}, &c{p6, "fd00::fa", true}},
		{"above rangeEnd", &c{p4, "10.0.0.251", false}, &c{p6, "fd00::fb", false}},
		{"excluded prefix first", &c{p4, "10.0.0.64", false}, &c{p6, "fd00::40", false}},
		{"excluded prefix last", &c{p4, "10.0.0.79", false}, &c{p6, "fd00::4f", false}},
		{"just after excluded prefix", &c{p4, "10.0.0.80", true}, &c{p6, "fd00::50", true}},
		{"excluded single address", &c{p4, "10.0.0.100", false}, &c{p6, "fd00::64", false}},
		{"point-to-point low", &c{ptp4, "10.0.0.6", true}, &c{ptp6, "fd00::6", true}},
		{"point-to-point high", &c{ptp4, "10.0.0.7", true}, &c{ptp6, "fd00::7", true}},
		{"single-address pool", &c{one4, "10.0.0.9", true}, &c{one6, "fd00::9", true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			family(t, tt.v4, tt.v6, func(t *testing.T, c c) {
				if got := c.pool.Permits(addr(c.a)); got != c.want {
					t.Errorf("pool %s Permits(%s) = %v, want %v", c.pool.CIDR, c.a, got, c.want)
				}
			})
		})
	}
}

func TestPoolBlocks(t *testing.T) {
	type c struct {
		pool        ipam.Pool
		numBlocks   uint64
		at          map[uint64]string // index -> block prefix
		index       map[string]uint64 // address -> block index
		outside     string
		first, last uint64 // BlockSpan
	}
	tests := []struct {
		name   string
		v4, v6 *c
	}{
		{"whole pool",
			&c{pool: ipam.Pool{Name: "a", CIDR: prefix("10.0.0.0/16"), BlockSize: 26}, numBlocks: 1024,
				at:      map[uint64]string{0: "10.0.0.0/26", 1: "10.0.0.64/26", 4: "10.0.1.0/26", 1023: "10.0.255.192/26"},
				index:   map[string]uint64{"10.0.0.0": 0, "10.0.0.63": 0, "10.0.0.64": 1, "10.0.1.5": 4, "10.0.255.255": 1023},
				outside: "10.1.0.0", first: 0, last: 1023},
			&c{pool: ipam.Pool{Name: "a", CIDR: prefix("fd00::/64"), BlockSize: 122}, numBlocks: 1 << 58,
				at:      map[uint64]string{0: "fd00::/122", 1: "fd00::40/122", 4: "fd00::100/122", 1<<58 - 1: "fd00::ffff:ffff:ffff:ffc0/122"},
				index:   map[string]uint64{"fd00::": 0, "fd00::3f": 0, "fd00::40": 1, "fd00::105": 4, "fd00::ffff:ffff:ffff:ffff": 1<<58 - 1},
				outside: "fd00:0:0:1::", first: 0, last: 1<<58 - 1}},
		{"range restricts the span",
			&c{pool: ipam.Pool{Name: "r", CIDR: prefix("10.0.0.0/16"), BlockSize: 26, RangeStart: addr("10.0.0.70"), RangeEnd: addr("10.0.1.10")},
				numBlocks: 1024, at: map[uint64]string{2: "10.0.0.128/26"}, index: map[string]uint64{"10.0.0.70": 1},
				outside: "9.255.255.255", first: 1, last: 4},
			&c{pool: ipam.Pool{Name: "r", CIDR: prefix("fd00::/64"), BlockSize: 122, RangeStart: addr("fd00::46"), RangeEnd: addr("fd00::10a")},
				numBlocks: 1 << 58, at: map[uint64]string{2: "fd00::80/122"}, index: map[string]uint64{"fd00::46": 1},
				outside: "fcff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", first: 1, last: 4}},
		{"blocks as large as the pool",
			&c{pool: ipam.Pool{Name: "w", CIDR: prefix("10.9.0.0/24"), BlockSize: 24}, numBlocks: 1,
				at: map[uint64]string{0: "10.9.0.0/24"}, index: map[string]uint64{"10.9.0.255": 0}, outside: "10.9.1.0", last: 0},
			&c{pool: ipam.Pool{Name: "w", CIDR: prefix("fd09::/112"), BlockSize: 112}, numBlocks: 1,
				at: map[uint64]string{0: "fd09::/112"}, index: map[string]uint64{"fd09::ffff": 0}, outside: "fd09::1:0", last: 0}},
		{"single-address blocks",
			&c{pool: ipam.Pool{Name: "s", CIDR: prefix("10.9.0.0/24"), BlockSize: 32}, numBlocks: 256,
				at: map[uint64]string{7: "10.9.0.7/32", 255: "10.9.0.255/32"}, index: map[string]uint64{"10.9.0.200": 200}, outside: "10.9.1.0", last: 255},
			&c{pool: ipam.Pool{Name: "s", CIDR: prefix("fd09::/120"), BlockSize: 128}, numBlocks: 256,
				at: map[uint64]string{7: "fd09::7/128", 255: "fd09::ff/128"}, index: map[string]uint64{"fd09::c8": 200}, outside: "fd09::100", last: 255}},
		{"IPv6 pool wider than 64 host bits", nil,
			&c{pool: ipam.Pool{Name: "b", CIDR: prefix("fd00::/60"), BlockSize: 122}, numBlocks: 1 << 62,
				at: map[uint64]string{1: "fd00::40/122", 1 << 58: "fd00:0:0:1::/122", 15<<58 + 2: "fd00:0:0:f::80/122",
					1<<62 - 1: "fd00:0:0:f:ffff:ffff:ffff:ffc0/122"},
				index:   map[string]uint64{"fd00:0:0:1::": 1 << 58, "fd00:0:0:f::85": 15<<58 + 2, "fd00:0:0:f:ffff:ffff:ffff:ffff": 1<<62 - 1},
				outside: "fd00:0:0:10::", last: 1<<62 - 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			family(t, tt.v4, tt.v6, func(t *testing.T, c c) {
				p := c.pool
				if err := p.Validate(); err != nil {
					t.Fatal(err)
				}
				if got := p.NumBlocks(); got != c.numBlocks {
					t.Errorf("NumBlocks = %d, want %d", got, c.numBlocks)
				}
				for i, want := range c.at {
					if got := p.BlockAt(i); got != prefix(want) {
						t.Errorf("BlockAt(%d) = %s, want %s", i, got, want)
					}
					if got, ok := p.BlockIndex(prefix(want).Addr()); !ok || got != i {
						t.Errorf("BlockIndex(%s) = %d, %v, want %d", prefix(want).Addr(), got, ok, i)
					}
				}
				for a, want := range c.index {
					if got, ok := p.BlockIndex(addr(a)); !ok || got != want {
						t.Errorf("BlockIndex(%s) = %d, %v, want %d, true", a, got, ok, want)
					}
					if blk := p.BlockAt(want); !blk.Contains(addr(a)) {
						t.Errorf("BlockAt(%d) = %s does not contain %s", want, blk, a)
					}
				}
				if _, ok := p.BlockIndex(addr(c.outside)); ok {
					t.Errorf("BlockIndex(%s) ok for an address outside %s", c.outside, p.CIDR)
				}
				if first, last := p.BlockSpan(); first != c.first || last != c.last {
					t.Errorf("BlockSpan = %d, %d, want %d, %d", first, last, c.first, c.last)
				}
			})
		})
	}
}

func TestPoolUsable(t *testing.T) {
	type c struct {
		pool ipam.Pool
		want uint64
		// slack allows the documented approximation for huge pools.
		slack uint64
	}
	tests := []struct {
		name   string
		v4, v6 *c
	}{
		{"plain",
			&c{pool: ipam.Pool{Name: "a", CIDR: prefix("10.0.0.0/24"), BlockSize: 26}, want: 254},
			&c{pool: ipam.Pool{Name: "a", CIDR: prefix("fd00::/120"), BlockSize: 122}, want: 255}},
		{"gateway",
			&c{pool: ipam.Pool{Name: "a", CIDR: prefix("10.0.0.0/24"), BlockSize: 26, Gateway: addr("10.0.0.1")}, want: 253},
			&c{pool: ipam.Pool{Name: "a", CIDR: prefix("fd00::/120"), BlockSize: 122, Gateway: addr("fd00::1")}, want: 254}},
		{"range",
			&c{pool: ipam.Pool{Name: "a", CIDR: prefix("10.0.0.0/24"), BlockSize: 26, Gateway: addr("10.0.0.1"), RangeStart: addr("10.0.0.10"), RangeEnd: addr("10.0.0.200")}, want: 191},
			&c{pool: ipam.Pool{Name: "a", CIDR: prefix("fd00::/120"), BlockSize: 122, Gateway: addr("fd00::1"), RangeStart: addr("fd00::a"), RangeEnd: addr("fd00::c8")}, want: 191}},
		{"range and exclude",
			&c{pool: ipam.Pool{Name: "a", CIDR: prefix("10.0.0.0/24"), BlockSize: 26, RangeStart: addr("10.0.0.10"), RangeEnd: addr("10.0.0.200"), Exclude: pfxs("10.0.0.64/28", "10.0.0.0/29")}, want: 175},
			&c{pool: ipam.Pool{Name: "a", CIDR: prefix("fd00::/120"), BlockSize: 122, RangeStart: addr("fd00::a"), RangeEnd: addr("fd00::c8"), Exclude: pfxs("fd00::40/124", "fd00::/125")}, want: 175}},
		{"a /16 and a /112 are counted exactly",
			&c{pool: ipam.Pool{Name: "a", CIDR: prefix("10.0.0.0/16"), BlockSize: 26}, want: 65534},
			&c{pool: ipam.Pool{Name: "a", CIDR: prefix("fd00::/112"), BlockSize: 122}, want: 65535}},
		{"huge pools are approximated",
			&c{pool: ipam.Pool{Name: "a", CIDR: prefix("10.0.0.0/8"), BlockSize: 16}, want: 1<<24 - 2, slack: 2},
			&c{pool: ipam.Pool{Name: "a", CIDR: prefix("fd00::/64"), BlockSize: 122}, want: math.MaxUint64, slack: 2}},
		{"huge range inside a wide IPv6 pool", nil,
			&c{pool: ipam.Pool{Name: "a", CIDR: prefix("fd00::/56"), BlockSize: 112,
				RangeStart: addr("fd00:0:0:5::"), RangeEnd: addr("fd00:0:0:5::ffff:ffff")}, want: 1 << 32, slack: 2}},
		{"range of more than 2^64 addresses saturates", nil,
			&c{pool: ipam.Pool{Name: "a", CIDR: prefix("fd00::/56"), BlockSize: 112,
				RangeStart: addr("fd00::1"), RangeEnd: addr("fd00:0:0:2::")}, want: math.MaxUint64}},
		{"wide pool without range saturates", nil,
			&c{pool: ipam.Pool{Name: "a", CIDR: prefix("fd00::/60"), BlockSize: 122}, want: math.MaxUint64}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			family(t, tt.v4, tt.v6, func(t *testing.T, c c) {
				got := c.pool.Usable()
				diff := max(got, c.want) - min(got, c.want)
				if diff > c.slack {
					t.Errorf("Usable(%s) = %d, want %d (±%d)", c.pool.CIDR, got, c.want, c.slack)
				}
			})
		})
	}
}

func TestPoolHasRoom(t *testing.T) {
	p4 := ipam.Pool{Name: "a", CIDR: prefix("10.0.0.0/24"), BlockSize: 28, RangeStart: addr("10.0.0.20"), RangeEnd: addr("10.0.0.200"), Exclude: pfxs("10.0.0.64/27")}
	p6 := ipam.Pool{Name: "a", CIDR: prefix("fd00::/120"), BlockSize: 124, RangeStart: addr("fd00::14"), RangeEnd: addr("fd00::c8"), Exclude: pfxs("fd00::40/123")}
	type c struct {
		pool  ipam.Pool
		block string
		want  bool
		n     int
	}
	tests := []struct {
		name   string
		v4, v6 *c
	}{
		{"before the range", &c{p4, "10.0.0.0/28", false, 0}, &c{p6, "fd00::/124", false, 0}},
		{"partly in the range", &c{p4, "10.0.0.16/28", true, 12}, &c{p6, "fd00::10/124", true, 12}},
		{"fully excluded", &c{p4, "10.0.0.80/28", false, 0}, &c{p6, "fd00::50/124", false, 0}},
		{"inside", &c{p4, "10.0.0.96/28", true, 16}, &c{p6, "fd00::60/124", true, 16}},
		{"after the range", &c{p4, "10.0.0.208/28", false, 0}, &c{p6, "fd00::d0/124", false, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			family(t, tt.v4, tt.v6, func(t *testing.T, c c) {
				if got := c.pool.HasRoom(prefix(c.block)); got != c.want {
					t.Errorf("HasRoom(%s) = %v, want %v", c.block, got, c.want)
				}
				if got := c.pool.PermittedIn(prefix(c.block)); got != c.n {
					t.Errorf("PermittedIn(%s) = %d, want %d", c.block, got, c.n)
				}
			})
		})
	}
}

func TestPoolSameDefinition(t *testing.T) {
	base := ipam.Pool{Name: "a", CIDR: prefix("10.0.0.0/24"), BlockSize: 26, Gateway: addr("10.0.0.1"), Exclude: pfxs("10.0.0.8/29")}
	other := base
	other.Name, other.NodeSelector, other.Disabled, other.StrictAffinity, other.Sticky, other.Origin = "b", "zone=a", true, true, true, "cli"
	other.Exclude = pfxs("10.0.0.8/29") // equal content, different slice
	if !base.SameDefinition(other) {
		t.Errorf("pools differing only in name, selector, flags and origin are not the same definition")
	}
	for name, f := range map[string]func(*ipam.Pool){
		"cidr":       func(p *ipam.Pool) { p.CIDR = prefix("10.0.1.0/24") },
		"block size": func(p *ipam.Pool) { p.BlockSize = 27 },
		"gateway":    func(p *ipam.Pool) { p.Gateway = addr("10.0.0.254") },
		"rangeStart": func(p *ipam.Pool) { p.RangeStart = addr("10.0.0.5") },
		"rangeEnd":   func(p *ipam.Pool) { p.RangeEnd = addr("10.0.0.5") },
		"exclude":    func(p *ipam.Pool) { p.Exclude = nil },
	} {
		q := base
		q.Exclude = pfxs("10.0.0.8/29")
		f(&q)
		if base.SameDefinition(q) {
			t.Errorf("pools with a different %s are the same definition", name)
		}
	}
}
