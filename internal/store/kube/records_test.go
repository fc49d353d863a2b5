package kube

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

func TestRecordRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 27, 3, 20, 0, 123456789, time.UTC)
	att := [3]string{"net work", "c/0", "net%1"}
	for _, c := range []struct {
		name string
		h    store.HandleSpec
		want string
	}{
		{"IPv4, ID only", store.HandleSpec{ID: "kindnet.c0ffee.eth0", IPs: []store.AddrSpec{{Addr: netip.MustParseAddr("10.0.0.5"), Pool: "blue"}}},
			"kindnet.c0ffee.eth0 10.0.0.5@blue"},
		{"IPv6, ID only", store.HandleSpec{ID: "kindnet.c0ffee.eth0", IPs: []store.AddrSpec{{Addr: netip.MustParseAddr("fd00:22::41"), Pool: "fd00::-64"}}},
			"kindnet.c0ffee.eth0 fd00:22::41@fd00::-64"},
		{"dual-stack pod", store.HandleSpec{ID: "kindnet.c0ffee.eth0", NetNS: "/var/run/netns/cni-1", Namespace: "default", Pod: "web-0", PodUID: "8a1c", Created: at,
			IPs: []store.AddrSpec{{Addr: netip.MustParseAddr("10.0.0.5"), Pool: "blue"}, {Addr: netip.MustParseAddr("fd00:22::41"), Pool: "blue6"}}},
			"kindnet.c0ffee.eth0 10.0.0.5@blue,fd00:22::41@blue6 netns=/var/run/netns/cni-1 ns=default pod=web-0 uid=8a1c at=2026-11-27T03:20:00.123456789Z"},
		{"borrowed, legacy ID with an attachment", store.HandleSpec{ID: "legacy handle: id", Node: "node-b", Attachment: &att,
			IPs: []store.AddrSpec{{Addr: netip.MustParseAddr("fd00::7f"), Pool: "p,@%"}}},
			"legacy%20handle:%20id fd00::7f@p%2C%40%25 node=node-b att=net%20work/c%2F0/net%251"},
		{"non-ASCII and control bytes", store.HandleSpec{ID: "ü\t", NetNS: "/a b", IPs: []store.AddrSpec{{Addr: netip.MustParseAddr("10.0.0.1"), Pool: "p"}}},
			"%C3%BC%09 10.0.0.1@p netns=/a%20b"},
		{"time with an offset", store.HandleSpec{ID: "a.b.c", Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("", 3600)),
			IPs: []store.AddrSpec{{Addr: netip.MustParseAddr("10.0.0.1"), Pool: "p"}}},
			"a.b.c 10.0.0.1@p at=2026-01-02T03:04:05+01:00"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := formatRecord(&c.h)
			if got != c.want {
				t.Fatalf("formatRecord:\n  %s\nwant\n  %s", got, c.want)
			}
			back, err := parseRecord(got)
			if err != nil {
				t.Fatal(err)
			}
			if !back.Created.Equal(c.h.Created) {
				t.Fatalf("created %v, want %v", back.Created, c.h.Created)
			}
			back.Created, c.h.Created = time.Time{}, time.Time{}
			if !reflect.DeepEqual(back, c.h) {
				t.Fatalf("parseRecord: %+v, want %+v", back, c.h)
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
		if h, err := parseRecord(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseRecord(%q) = %+v, %v; want an error naming %q", c.in, h, err, c.want)
		}
	}
}

// FuzzRecord: whatever parseRecord accepts, formatRecord writes in a form
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
		h, err := parseRecord(s)
		if err != nil {
			return
		}
		out := formatRecord(&h)
		h2, err := parseRecord(out)
		if err != nil {
			t.Fatalf("%q parsed, its format %q does not: %v", s, out, err)
		}
		if !h2.Created.Equal(h.Created) {
			t.Fatalf("%q: created %v, then %v", s, h.Created, h2.Created)
		}
		if again := formatRecord(&h2); again != out {
			t.Fatalf("%q formats as %q, then %q", s, out, again)
		}
		h.Created, h2.Created = time.Time{}, time.Time{}
		if !reflect.DeepEqual(h, h2) {
			t.Fatalf("%q: %+v, then %+v", s, h, h2)
		}
	})
}

// TestNodeOldFormRead: an IPAMNode written before records were strings
// (its records JSON objects under "handles") is read as the same node
// object, and the next update writes it as strings.
func TestNodeOldFormRead(t *testing.T) {
	st := openStore(t)
	admin := openAdmin(t, st.Prefix())
	ctx := ctxT(t)
	n := dualStackNode(t, "node-a", "node-b")
	spec, err := store.EncodeNode(n)
	if err != nil {
		t.Fatal(err)
	}
	// As the previous version sent it: store.NodeSpec with the node's name.
	old, _ := json.Marshal(struct {
		Node string `json:"node"`
		store.NodeSpec
	}{n.Name, spec})
	old = []byte(strings.Replace(string(old), `"handles":`, `"records":[],"handles":`, 1))
	name := st.names.object(n.Name)
	body, _ := admin.newObject(kindNode, name, map[string]string{LendsPrefix + "node-b": ""}, old, "")
	if _, err := admin.create(ctx, kindNode, name, body); err != nil {
		t.Fatal(err)
	}
	got, err := st.GetNode(ctx, n.Name)
	if err != nil {
		t.Fatal(err)
	}
	sameNode(t, got, n)
	if _, err := st.UpdateNode(ctx, got); err != nil {
		t.Fatal(err)
	}
	o, err := admin.get(ctx, kindNode, name)
	if err != nil {
		t.Fatal(err)
	}
	var w nodeWire
	if err := json.Unmarshal(o.Spec, &w); err != nil {
		t.Fatal(err)
	}
	if len(w.Handles) != 0 || len(w.Records) != len(n.Handles) {
		t.Fatalf("after an update: %s; want records as strings only", o.Spec)
	}
	again, err := st.GetNode(ctx, n.Name)
	if err != nil {
		t.Fatal(err)
	}
	sameNode(t, again, n)
}
