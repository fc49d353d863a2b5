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
			if !back.Created.Equal(c.h.Created) {
				t.Fatalf("created %v, want %v", back.Created, c.h.Created)
			}
			back.Created, c.h.Created = time.Time{}, time.Time{}
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
		{"a.b.c 10.0.0.1@p pod=", "pod: empty"},
		{"a.b.c 10.0.0.1@p pod=%2", "without two hex digits"},
		{"a.b.c 10.0.0.1@p pod=%zz", "without two hex digits"},
		{"a.b.c 10.0.0.1@p att=a/b", "want <network>/<container>/<ifname>"},
		{"a.b.c 10.0.0.1@p at=yesterday", "at:"},
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
		if !h2.Created.Equal(h.Created) {
			t.Fatalf("%q: created %v, then %v", s, h.Created, h2.Created)
		}
		if again := FormatRecord(&h2); again != out {
			t.Fatalf("%q formats as %q, then %q", s, out, again)
		}
		h.Created, h2.Created = time.Time{}, time.Time{}
		if !reflect.DeepEqual(h, h2) {
			t.Fatalf("%q: %+v, then %+v", s, h, h2)
		}
	})
}
