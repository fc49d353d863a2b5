package config

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// repeatJSON joins n renderings of item(i) with commas.
func repeatJSON(n int, item func(i int) string) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = item(i)
	}
	return strings.Join(parts, ",")
}

// v4Subnet24 is the i-th /24 of 10.0.0.0/8.
func v4Subnet24(i int) string { return fmt.Sprintf("10.%d.%d.0/24", i/256%256, i%256) }

// v6Subnet64 is the i-th /64 of fd00::/48.
func v6Subnet64(i int) string { return fmt.Sprintf("fd00:0:0:%x::/64", i) }

// TestParseRejectsUnusableRanges: a range whose every address is the
// network or broadcast address, the gateway or excluded, a gateway that is
// the network or broadcast address, or a block too large for a pool is
// refused by the parser, before anything opens a datastore. IPv4 and IPv6
// side by side.
func TestParseRejectsUnusableRanges(t *testing.T) {
	tests := []rejectCase{
		{"gateway is the network address v4", conf(`{"ranges": [[{"subnet": "10.0.0.0/24", "gateway": "10.0.0.0"}]]}`),
			"ipam.ranges[0][0].gateway", []string{`"10.0.0.0" is the network address of subnet 10.0.0.0/24`}},
		{"gateway is the network address v6", conf(`{"ranges": [[{"subnet": "fd00::/64", "gateway": "fd00::"}]]}`),
			"ipam.ranges[0][0].gateway", []string{`"fd00::" is the network address of subnet fd00::/64`}},
		{"gateway is the broadcast address v4", conf(`{"subnet": "10.0.0.0/24", "gateway": "10.0.0.255"}`),
			"ipam.gateway", []string{`"10.0.0.255" is the broadcast address of subnet 10.0.0.0/24`}},
		{"whereabouts gateway is the network address v4", conf(`{"range": "10.0.0.0/24", "gateway": "10.0.0.0", "datastore": {"type": "local"}}`),
			"ipam.gateway", []string{"is the network address"}},
		{"range is the network address only v4", conf(`{"ranges": [[{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.0", "rangeEnd": "10.0.0.0"}]]}`),
			"ipam.ranges[0][0]", []string{"(10.0.0.0-10.0.0.0 in 10.0.0.0/24) has no address to hand out", "the network address"}},
		{"range is the network address only v6", conf(`{"ranges": [[{"subnet": "fd00::/120", "rangeStart": "fd00::", "rangeEnd": "fd00::"}]]}`),
			"ipam.ranges[0][0]", []string{"has no address to hand out", "the network address"}},
		{"range is the broadcast address only v4", conf(`{"range": "10.0.0.255-10.0.0.255/24", "datastore": {"type": "local"}}`),
			"ipam.range", []string{"has no address to hand out", "the broadcast address"}},
		{"range is network and broadcast of a /30 with the gateway between v4",
			conf(`{"subnet": "10.0.0.0/30", "rangeStart": "10.0.0.0", "rangeEnd": "10.0.0.3", "gateway": "10.0.0.1", "exclude": ["10.0.0.2"]}`),
			"ipam.subnet", []string{"has no address to hand out", "the network address", "the broadcast address", "the gateway 10.0.0.1", "excluded"}},
		{"rangeStart = rangeEnd = gateway v4", conf(`{"ranges": [[{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.1", "rangeEnd": "10.0.0.1"}]]}`),
			"ipam.ranges[0][0]", []string{"has no address to hand out", "the gateway 10.0.0.1"}},
		{"rangeStart = rangeEnd = gateway v6", conf(`{"ranges": [[{"subnet": "fd00::/64", "rangeStart": "fd00::7", "rangeEnd": "fd00::7", "gateway": "fd00::7"}]]}`),
			"ipam.ranges[0][0]", []string{"has no address to hand out", "the gateway fd00::7"}},
		{"exclude covers the range v4", conf(`{"subnet": "10.0.0.0/24", "exclude": ["10.0.0.0/25", "10.0.0.128/25"]}`),
			"ipam.subnet", []string{"has no address to hand out", "excluded"}},
		{"exclude covers the range v6", conf(`{"range": "fd00::/64", "exclude": ["fd00::/1"], "datastore": {"type": "local"}}`),
			"ipam.range", []string{"has no address to hand out"}},
		{"many small excludes cover the range v4", conf(`{"subnet": "10.0.0.0/26", "exclude": [` +
			repeatJSON(64, func(i int) string { return fmt.Sprintf(`"10.0.0.%d"`, i) }) + `]}`),
			"ipam.subnet", []string{"has no address to hand out"}},
		{"blockSize /9 v4", conf(`{"pools": ["p"], "blockSize": 9}`), "ipam.blockSize", []string{"9 is too large a block", "/16 or longer"}},
		{"ipv6BlockSize /64", conf(`{"pools": ["p"], "ipv6BlockSize": 64}`), "ipam.ipv6BlockSize", []string{"64 is too large a block", "/112 or longer"}},
		{"IPv6 range cut into too many blocks", conf(`{"ranges": [[{"subnet": "fd00::/8"}]]}`),
			"ipam.ranges[0][0]", []string{"cannot become a pool", "2^62 blocks"}},
	}
	checkRejects(t, tests)
}

// TestParseAcceptsBarelyUsableRanges: the boundary cases one address away
// from the rejected ones are accepted.
func TestParseAcceptsBarelyUsableRanges(t *testing.T) {
	for _, in := range []string{
		`{"ranges": [[{"subnet": "10.0.0.0/30"}]]}`,                                       // .2 is left
		`{"ranges": [[{"subnet": "fd00::/126"}]]}`,                                        // ::2, ::3
		`{"subnet": "10.0.0.0/24", "exclude": ["10.0.0.0/25", "10.0.0.128/26"]}`,          // .192-.254
		`{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.254", "rangeEnd": "10.0.0.255"}`, // .254
		`{"ranges": [[{"subnet": "fd00::/64", "rangeStart": "fd00::7", "rangeEnd": "fd00::8", "gateway": "fd00::7"}]]}`,
		`{"pools": ["p"], "blockSize": 16, "ipv6BlockSize": 112}`,
	} {
		if _, err := parse(conf(in), testEnv(nil)); err != nil {
			t.Errorf("%s: %v", in, err)
		}
	}
}

// TestFirstUsable checks the first address handed out, IPv4 and IPv6.
func TestFirstUsable(t *testing.T) {
	for _, tc := range []struct {
		r    Range
		want string
	}{
		{Range{Subnet: pfx("10.0.0.0/24"), Gateway: addr("10.0.0.1")}, "10.0.0.2"},
		{Range{Subnet: pfx("10.0.0.0/24"), Gateway: addr("10.0.0.1"), Exclude: pfxs("10.0.0.0/28", "10.0.0.4/30", "10.0.0.16/32")}, "10.0.0.17"},
		{Range{Subnet: pfx("fd00::/64"), Gateway: addr("fd00::1"), Exclude: pfxs("fd00::2/127")}, "fd00::4"},
		{Range{Subnet: pfx("fd00::/64"), RangeStart: addr("fd00::ffff"), Exclude: pfxs("fd00::ffff/128", "fd00::1:0/112")}, "fd00::2:0"},
		{Range{Subnet: pfx("10.0.0.0/30"), RangeStart: addr("10.0.0.3")}, ""},
	} {
		got, ok := firstUsable(tc.r)
		switch {
		case tc.want == "" && ok:
			t.Errorf("firstUsable(%+v) = %v, want none", tc.r, got)
		case tc.want != "" && (!ok || got != addr(tc.want)):
			t.Errorf("firstUsable(%+v) = %v, %v; want %s", tc.r, got, ok, tc.want)
		}
	}
}

// TestParseLimits: every list a config can make long is bounded, and the
// error names the key and the limit; IPv4 and IPv6 side by side.
func TestParseLimits(t *testing.T) {
	long := strings.Repeat("a", MaxNameLength+1)
	sets := func(n int, subnet func(int) string) string {
		return `{"ranges": [` + repeatJSON(n, func(i int) string { return `[{"subnet": "` + subnet(i) + `"}]` }) + `]}`
	}
	oneSet := func(n int, subnet func(int) string) string {
		return `{"ranges": [[` + repeatJSON(n, func(i int) string { return `{"subnet": "` + subnet(i) + `"}` }) + `]]}`
	}
	tests := []rejectCase{
		{"config larger than the limit", []byte(`{"name": "n", "ipam": {"subnet": "10.0.0.0/24"}, "pad": "` + strings.Repeat("x", MaxConfigBytes) + `"}`),
			"", []string{"more than the limit of 1048576 bytes"}},
		{"100 000 range sets v4 (the report's case) is over the size limit", conf(sets(100000, v4Subnet24)), "", []string{"more than the limit of 1048576 bytes"}},
		{"20 000 range sets v4", conf(sets(20000, v4Subnet24)), "ipam.ranges", []string{"has 20000 range sets, more than the limit of 16"}},
		{"17 range sets v6", conf(sets(17, v6Subnet64)), "ipam.ranges", []string{"has 17 range sets, more than the limit of 16"}},
		{"legacy subnet plus 16 range sets", conf(`{"subnet": "10.255.0.0/24", ` + sets(16, v4Subnet24)[1:]), "ipam", []string{"17 range sets, more than the limit of 16"}},
		{"257 ranges in one set v4", conf(oneSet(257, v4Subnet24)), "ipam.ranges", []string{"has 257 ranges, more than the limit of 256"}},
		{"257 ranges in one set v6", conf(oneSet(257, v6Subnet64)), "ipam.ranges", []string{"has 257 ranges, more than the limit of 256"}},
		{"17 whereabouts ipRanges", conf(`{"ipRanges": [` + repeatJSON(17, func(i int) string { return `{"range": "` + v4Subnet24(i) + `"}` }) + `]}`),
			"ipam.ipRanges", []string{"has 17 ranges", "limit of 16"}},
		{"1025 routes v4", conf(`{"subnet": "10.0.0.0/24", "routes": [` + repeatJSON(1025, func(i int) string { return `{"dst": "` + v4Subnet24(i) + `"}` }) + `]}`),
			"ipam.routes", []string{"has 1025 routes, more than the limit of 1024"}},
		{"1025 excludes v6", conf(`{"subnet": "fd00::/64", "exclude": [` + repeatJSON(1025, func(i int) string { return fmt.Sprintf(`"fd00::%x"`, i+2) }) + `]}`),
			"ipam.exclude", []string{"has 1025 entries, more than the limit of 1024"}},
		{"excludes over the limit together", conf(`{"range": "10.0.0.0/16", "exclude": [` + repeatJSON(600, func(i int) string { return fmt.Sprintf(`"10.0.%d.%d"`, i/200, i%200+2) }) +
			`], "ipRanges": [{"range": "fd00::/64", "exclude": [` + repeatJSON(600, func(i int) string { return fmt.Sprintf(`"fd00::%x"`, i+2) }) + `]}]}`),
			"ipam", []string{"has 1200 exclude entries", "limit of 1024"}},
		{"257 pools", conf(`{"pools": [` + repeatJSON(257, func(i int) string { return fmt.Sprintf(`"p%d"`, i) }) + `]}`),
			"ipam.pools", []string{"has 257 entries, more than the limit of 256"}},
		{"65 nameservers", conf(`{"subnet": "10.0.0.0/24", "dns": {"nameservers": [` + repeatJSON(65, func(i int) string { return fmt.Sprintf(`"10.0.0.%d"`, i) }) + `]}}`),
			"ipam.dns.nameservers", []string{"more than the limit of 64"}},
		{"network name too long", []byte(`{"name": "` + long + `", "ipam": {"subnet": "10.0.0.0/24"}}`), "name", []string{"254 bytes long, more than the limit of 253"}},
		{"node name too long", conf(`{"subnet": "fd00::/64", "nodeName": "` + long + `"}`), "ipam.nodeName", []string{"more than the limit of 253"}},
		{"pool name too long", conf(`{"pools": ["` + long + `"]}`), "ipam.pools[0]", []string{"more than the limit of 253"}},
		{"network_name too long", conf(`{"range": "10.0.0.0/24", "network_name": "` + long + `", "datastore": {"type": "local"}}`),
			"ipam.network_name", []string{"more than the limit of 253"}},
	}
	checkRejects(t, tests)
	// $NODENAME is bounded too.
	_, err := parse(conf(`{"subnet": "10.0.0.0/24"}`), testEnv(map[string]string{"NODENAME": long}))
	checkErr(t, err, "$NODENAME", "more than the limit of 253")
}

// TestParseAtLimits: configs exactly at every limit are accepted.
func TestParseAtLimits(t *testing.T) {
	max := strings.Repeat("a", MaxNameLength)
	in := `{"nodeName": "` + max + `", "ranges": [` +
		repeatJSON(MaxRangeSets-1, func(i int) string { return `[{"subnet": "` + v4Subnet24(i) + `"}]` }) + `, [` +
		repeatJSON(MaxRanges-MaxRangeSets+1, func(i int) string { return `{"subnet": "` + v6Subnet64(i) + `"}` }) + `]],
		"exclude": [` + repeatJSON(MaxExcludes, func(i int) string { return fmt.Sprintf(`"10.0.%d.%d"`, i/200, i%200+2) }) + `],
		"routes": [` + repeatJSON(MaxRoutes, func(i int) string { return `{"dst": "` + v6Subnet64(i) + `"}` }) + `]}`
	got, err := parse([]byte(`{"name": "`+max+`", "ipam": `+in+`}`), testEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, got)
	if n := len(got.RangeSets); n != MaxRangeSets {
		t.Errorf("%d range sets, want %d", n, MaxRangeSets)
	}
}

// BenchmarkCheckRanges checks n disjoint ranges for overlaps; the time
// per range stays flat from 1 000 to 100 000 ranges (the check sorts
// instead of comparing every pair: pairwise, 100 000 ranges took minutes).
// The parser never gets that far (MaxRanges); this measures the algorithm.
// Run with go test -run x -bench CheckRanges ./internal/config.
func BenchmarkCheckRanges(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		specs := make([]*rangeSpec, n)
		for i := range specs {
			// Reverse order, so the sort has work to do.
			p := netip.MustParsePrefix(fmt.Sprintf("fd00:%x:%x::/64", (n-i)>>16, (n-i)&0xffff))
			specs[i] = &rangeSpec{r: Range{Subnet: p}, set: 0, name: fmt.Sprint(i)}
		}
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for b.Loop() {
				if err := checkRangeOverlaps(specs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/range")
		})
	}
}
