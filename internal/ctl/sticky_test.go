package ctl

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// TestStickyShown: ip show and block show name a sticky reservation's
// identity, whether a pod holds it and since when none does, IPv4 and
// IPv6, in tables and JSON.
func TestStickyShown(t *testing.T) {
	h := newHarness(t)
	h.ok(strings.Fields("pool add p4 --cidr 10.9.0.0/24 --block-size 28")...)
	h.ok("pool", "add", "p6", "--cidr", "fd00:9::/120", "--block-size", "124")
	h.store(func(a *allocator.Allocator) {
		for _, c := range []struct{ container, pod string }{{"c1", "pg-0"}, {"c2", "pg-1"}} {
			_, err := a.AllocateSticky(context.Background(), allocator.Request{
				Handle: ipam.Handle{ID: "net." + c.container + ".eth0", Network: "net", ContainerID: c.container, IfName: "eth0",
					Node: "node-a", Namespace: "db", Pod: c.pod, Sticky: "pod/db/" + c.pod},
				Sets: [][]string{{"p4"}, {"p6"}}})
			if err != nil {
				t.Fatal(err)
			}
		}
		if _, parked, err := a.ReleaseOrPark(context.Background(), "node-a", "net.c2.eth0"); err != nil || !parked {
			t.Fatalf("parked=%v %v", parked, err)
		}
	})
	for _, c := range []struct{ args, want []string }{
		{[]string{"ip", "show", "10.9.0.1"}, []string{"net.c1.eth0 (sticky pod/db/pg-0)", "db/pg-0"}},
		{[]string{"ip", "show", "fd00:9::2"}, []string{"net.c2.eth0 (sticky pod/db/pg-1, reserved, no pod since 2025-06-07T08:09:10Z)"}},
		{[]string{"block", "show", "10.9.0.0/28"}, []string{"net.c1.eth0 (sticky pod/db/pg-0)", "net.c2.eth0 (sticky pod/db/pg-1, reserved, no pod since 2025-06-07T08:09:10Z)"}},
	} {
		out := h.ok(c.args...)
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s:\n%s\nwant %q", strings.Join(c.args, " "), out, w)
			}
		}
	}
	var v blocksView
	if err := json.Unmarshal([]byte(h.ok("block", "show", "fd00:9::/124", "-o", "json")), &v); err != nil {
		t.Fatal(err)
	}
	al := v.Blocks[0].Allocations
	if len(al) != 2 || al[0].Sticky != "pod/db/pg-0" || !al[0].Parked.IsZero() || al[1].Sticky != "pod/db/pg-1" || al[1].Parked.IsZero() {
		t.Fatalf("json: %+v", al)
	}
}

// TestGCKeepsSticky: `gc` never frees a sticky handle whose network
// namespace is gone (its addresses stay with its identity: the plugin's
// GC or the controller parks it), and frees the plain one beside it.
func TestGCKeepsSticky(t *testing.T) {
	h := newHarness(t)
	h.ok(strings.Fields("pool add p4 --cidr 10.9.0.0/24 --block-size 28")...)
	h.ok("pool", "add", "p6", "--cidr", "fd00:9::/120", "--block-size", "124")
	h.store(func(a *allocator.Allocator) {
		_, err := a.AllocateSticky(context.Background(), allocator.Request{
			Handle: ipam.Handle{ID: "net.c1.eth0", Network: "net", ContainerID: "c1", IfName: "eth0",
				Node: "node-a", NetNS: "/var/run/netns/gone-1", Namespace: "db", Pod: "pg-0", Sticky: "pod/db/pg-0"},
			Sets: [][]string{{"p4"}, {"p6"}}})
		if err != nil {
			t.Fatal(err)
		}
		h.allocate(a, ipam.Handle{ID: "net.c2.eth0", Network: "net", ContainerID: "c2", IfName: "eth0", Node: "node-a",
			NetNS: "/var/run/netns/gone-2", Namespace: "db", Pod: "plain"}, []string{"p4"}, []string{"p6"})
	})
	var v gcView
	if err := json.Unmarshal([]byte(h.ok("gc", "-o", "json")), &v); err != nil || len(v.Released) != 1 || v.Released[0].Handle != "net.c2.eth0" || v.Kept != 1 {
		t.Fatalf("gc: %+v %v; want net.c2.eth0 released and the sticky net.c1.eth0 kept", v, err)
	}
	for _, addr := range []string{"10.9.0.1", "fd00:9::1"} {
		if out := h.ok("ip", "show", addr); !strings.Contains(out, "net.c1.eth0 (sticky pod/db/pg-0)") {
			t.Errorf("ip show %s after gc:\n%s\nwant it held by the sticky handle", addr, out)
		}
	}
}
