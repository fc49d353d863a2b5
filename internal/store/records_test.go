package store

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestRecordRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 27, 3, 20, 0, 123456789, time.UTC)
	att := [3]string{"net work", "c/0", "net%1"}
	for _, c := range []struct {
		name string
		h    HandleSpec
		want string
	}{
		{"IPv4, ID only", HandleSpec{ID: "kindnet.c0ffee.eth0", IPs: []AddrSpec{{Addr: netip.MustParseAddr("10.0.0.5"), Pool: "blue"}}},
			"kindnet.c0ffee.eth0 10.0.0.5@blue"},
		{"IPv6, ID only", HandleSpec{ID: "kindnet.c0ffee.eth0", IPs: []AddrSpec{{Addr: netip.MustParseAddr("fd00:22::41"), Pool: "fd00::-64"}}},
			"kindnet.c0ffee.eth0 fd00:22::41@fd00::-64"},
		{"dual-stack pod", HandleSpec{ID: "kindnet.c0ffee.eth0", NetNS: "/var/run/netns/cni-1", Namespace: "default", Pod: "web-0", PodUID: "8a1c", Created: at,
			IPs: []AddrSpec{{Addr: netip.MustParseAddr("10.0.0.5"), Pool: "blue"}, {Addr: netip.MustParseAddr("fd00:22::41"), Pool: "blue6"}}},
			"kindnet.c0ffee.eth0 10.0.0.5@blue,fd00:22::41@blue6 netns=/var/run/netns/cni-1 ns=default pod=web-0 uid=8a1c at=2026-11-27T03:20:00.123456789Z"},
		{"borrowed, legacy ID with an attachment", HandleSpec{ID: "legacy handle: id", Node: "node-b", Attachment: &att,
			IPs: []AddrSpec{{Addr: netip.MustParseAddr("fd00::7f"), Pool: "p,@%"}}},
			"legacy%20handle:%20id fd00::7f@p%2C%40%25 node=node-b att=net%20work/c%2F0/net%251"},
		{"non-ASCII and control bytes", HandleSpec{ID: "ü\t", NetNS: "/a b", IPs: []AddrSpec{{Addr: netip.MustParseAddr("10.0.0.1"), Pool: "p"}}},
			"%C3%BC%09 10.0.0.1@p netns=/a%20b"},
		{"sticky IPv4, parked", HandleSpec{ID: "kindnet.c0ffee.eth0", Namespace: "db", Pod: "pg-0", Sticky: "pod/db/pg-0", Created: at, Parked: at.Add(time.Hour),
			IPs: []AddrSpec{{Addr: netip.MustParseAddr("10.0.0.5"), Pool: "blue"}}},
			"kindnet.c0ffee.eth0 10.0.0.5@blue ns=db pod=pg-0 at=2026-11-27T03:20:00.123456789Z sticky=pod/db/pg-0 parked=2026-11-27T04:20:00.123456789Z"},
		{"sticky IPv6, live", HandleSpec{ID: "kindnet.c0ffee.eth0", Node: "node-b", Sticky: "vm/vms/fedora 1",
			IPs: []AddrSpec{{Addr: netip.MustParseAddr("fd00:22::41"), Pool: "blue6"}}},
			"kindnet.c0ffee.eth0 fd00:22::41@blue6 node=node-b sticky=vm/vms/fedora%201"},
		{"time with an offset", HandleSpec{ID: "a.b.c", Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("", 3600)),
			IPs: []AddrSpec{{Addr: netip.MustParseAddr("10.0.0.1"), Pool: "p"}}},
			"a.b.c 10.0.0.1@p at=2026-01-02T03:04:05+01:00"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := FormatRecord(&c.h)
			if got != c.want {
				t.Fatalf("FormatRecord:\n  %s\nwant\n  %s", got, c.want)
			}
			back, err := ParseRecord(got)
			if err != nil {
				t.Fatal(err)
			}
			if !back.Created.Equal(c.h.Created) || !back.Parked.Equal(c.h.Parked) {
				t.Fatalf("created %v, parked %v, want %v, %v", back.Created, back.Parked, c.h.Created, c.h.Parked)
			}
			back.Created, c.h.Created = time.Time{}, time.Time{}
			back.Parked, c.h.Parked = time.Time{}, time.Time{}
			if !reflect.DeepEqual(back, c.h) {
				t.Fatalf("ParseRecord: %+v, want %+v", back, c.h)
			}
		})
	}
}

func TestRecordRefused(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "want an ID and addresses"},
		{"a.b.c", "want an ID and addresses"},
		{" 10.0.0.1@p", "handle ID: empty"},
		{"a.b.c 10.0.0.1", "want <addr>@<pool>"},
		{"a.b.c 10.0.0.300@p", "not an IP address"},
		{"a.b.c fe80::1%eth0@p", "not an IP address"},
		{"a.b.c 10.0.0.1@", "pool of 10.0.0.1: empty"},
		{"a.b.c 10.0.0.1@p,", "want <addr>@<pool>"},
		{"a.b.c 10.0.0.1@p pod=x ns=y", "in that order"},
		{"a.b.c 10.0.0.1@p pod=x pod=y", "in that order"},
		{"a.b.c 10.0.0.1@p color=red", "in that order"},
		{"a.b.c 10.0.0.1@p pod", "in that order"},
		{"a.b.c 10.0.0.1@p  pod=x", "in that order"},
		{"a.b.c 10.0.0.1@p ", "in that order"},
		{"a.b.c 10.0.0.1@p pod=x ", "in that order"},
		{"a.b.c 10.0.0.1@p pod=", "pod: empty"},
		{"a.b.c 10.0.0.1@p pod=%2", "without two hex digits"},
		{"a.b.c 10.0.0.1@p pod=%zz", "without two hex digits"},
		{"a.b.c 10.0.0.1@p att=a/b", "want <network>/<container>/<ifname>"},
		{"a.b.c 10.0.0.1@p at=yesterday", "at:"},
		{"a.b.c 10.0.0.1@p parked=soon", "parked:"},
		{"a.b.c 10.0.0.1@p sticky=", "sticky: empty"},
		{"a.b.c 10.0.0.1@p parked=2026-01-02T03:04:05Z sticky=pod/a/b", "in that order"},
	} {
		if h, err := ParseRecord(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseRecord(%q) = %+v, %v; want an error naming %q", c.in, h, err, c.want)
		}
	}
}

// FuzzRecord: whatever ParseRecord accepts, FormatRecord writes in a form
// that parses to the same record and formats to itself.
func FuzzRecord(f *testing.F) {
	for _, s := range []string{
		"kindnet.c0ffee.eth0 10.0.0.5@blue,fd00:22::41@blue6 netns=/var/run/netns/cni-1 ns=default pod=web-0 uid=8a1c at=2026-11-27T03:20:00.123456789Z",
		"legacy%20handle:%20id fd00::7f@p%2C%40%25 node=node-b att=net%20work/c%2F0/net%251",
		"a.b.c 10.0.0.1@p at=2026-01-02T03:04:05+01:00",
		"%c3%bc 10.0.0.1@p%2c",
		"a.b.c 10.0.0.1@p,fd00::1@q ns=db pod=pg-0 sticky=pod/db/pg-0 parked=2026-01-02T03:04:05Z",
		"a.b.c fd00::1@q node=n sticky=vm/a%2Fb/c",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := ParseRecord(s)
		if err != nil {
			return
		}
		out := FormatRecord(&h)
		h2, err := ParseRecord(out)
		if err != nil {
			t.Fatalf("%q parsed, its format %q does not: %v", s, out, err)
		}
		if !h2.Created.Equal(h.Created) || !h2.Parked.Equal(h.Parked) {
			t.Fatalf("%q: created %v, parked %v, then %v, %v", s, h.Created, h.Parked, h2.Created, h2.Parked)
		}
		if again := FormatRecord(&h2); again != out {
			t.Fatalf("%q formats as %q, then %q", s, out, again)
		}
		h.Created, h2.Created = time.Time{}, time.Time{}
		h.Parked, h2.Parked = time.Time{}, time.Time{}
		if !reflect.DeepEqual(h, h2) {
			t.Fatalf("%q: %+v, then %+v", s, h, h2)
		}
	})
}

// TestRecordWithoutStickyTokens: a record written before sticky
// addresses existed decodes as a handle that is not sticky, and formats
// back to itself.
func TestRecordWithoutStickyTokens(t *testing.T) {
	for _, old := range []string{
		"kindnet.c0ffee.eth0 10.0.0.5@blue,fd00:22::41@blue6 netns=/var/run/netns/cni-1 ns=default pod=web-0 uid=8a1c at=2026-11-27T03:20:00.123456789Z",
		"kindnet.c0ffee.eth0 fd00:22::41@blue6 node=node-b",
	} {
		h, err := ParseRecord(old)
		if err != nil {
			t.Fatal(err)
		}
		if h.Sticky != "" || !h.Parked.IsZero() {
			t.Fatalf("%q: sticky %q parked %v", old, h.Sticky, h.Parked)
		}
		if got := FormatRecord(&h); got != old {
			t.Fatalf("%q formats as %q", old, got)
		}
	}
}
