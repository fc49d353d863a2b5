package kube

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// Pools of the fixtures: one per family, the IPv6 one named as a config
// names it (':' in it, so its object name is hashed).
var (
	pool4 = ipam.Pool{Name: "blue", CIDR: netip.MustParsePrefix("10.0.0.0/16"), BlockSize: 26,
		Gateway: netip.MustParseAddr("10.0.0.1"), RangeStart: netip.MustParseAddr("10.0.0.2"), RangeEnd: netip.MustParseAddr("10.0.255.254"),
		Exclude:      []netip.Prefix{netip.MustParsePrefix("10.0.9.0/24"), netip.MustParsePrefix("10.0.10.0/24")},
		NodeSelector: "zone in (a,b)", StrictAffinity: true, Sticky: true, Origin: "config"}
	pool6 = ipam.Pool{Name: "fd00::-64", CIDR: netip.MustParsePrefix("fd00:22::/64"), BlockSize: 122,
		Gateway: netip.MustParseAddr("fd00:22::1"), Disabled: true, Deleting: true, Origin: "cli"}
)

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// dualStackNode is a full node object: an IPv4 and an IPv6 block, a
// dual-stack handle whose ID spells its attachment (stored without one), a
// handle with a legacy ID (stored with its attachment), and a record of
// another node's handle (borrowed, so the object lends to that node), and a
// loan (a handle of this node holding an address in another node's block).
func dualStackNode(t testing.TB, name, borrower string) store.Node {
	t.Helper()
	return dualStackNodeIn(t, name, borrower, 0)
}

// dualStackNodeIn is dualStackNode in the k-th pair of blocks
// (10.0.k.64/26, fd00:22::k:40/122): node objects stored side by side
// hold blocks of their own.
func dualStackNodeIn(t testing.TB, name, borrower string, k int) store.Node {
	t.Helper()
	v4 := func(last int) string { return fmt.Sprintf("10.0.%d.%d", k, last) }
	v6 := func(last string) string { return fmt.Sprintf("fd00:22::%x:%s", k, last) }
	b4 := ipam.NewBlock(pool4, netip.MustParsePrefix(v4(64)+"/26"), name)
	b6 := ipam.NewBlock(pool6, netip.MustParsePrefix(v6("40")+"/122"), name)
	created := time.Date(2025, 3, 4, 5, 6, 7, 890123456, time.UTC)
	h1 := ipam.Handle{ID: ipam.HandleID("kindnet", "c0ffee", "eth0"), Network: "kindnet", ContainerID: "c0ffee", IfName: "eth0",
		Node: name, NetNS: "/var/run/netns/cni-1", Namespace: "default", Pod: "web-0", PodUID: "8a1c5a3e-0000-4000-8000-000000000001", Created: created}
	h2 := ipam.Handle{ID: "legacy handle: id", Network: "net.work", ContainerID: "abc", IfName: "net1", Node: name, Created: created.Add(time.Second)}
	h3 := ipam.Handle{ID: ipam.HandleID("kindnet", "beef", "eth0"), Network: "kindnet", ContainerID: "beef", IfName: "eth0",
		Node: borrower, Namespace: "kube-system", Pod: "dns-1"}
	assign := func(b *ipam.Block, p ipam.Pool, h *ipam.Handle, addr string) {
		t.Helper()
		a := netip.MustParseAddr(addr)
		nb, err := b.AssignAddr(p, a, h.ID)
		if err != nil {
			t.Fatal(err)
		}
		*b = nb
		h.IPs = append(h.IPs, ipam.HandleIP{Addr: a, Pool: p.Name, Block: b.CIDR})
	}
	assign(&b4, pool4, &h1, v4(70))
	assign(&b6, pool6, &h1, v6("41"))
	assign(&b4, pool4, &h2, v4(71))
	assign(&b6, pool6, &h3, v6("7f"))
	// h2 also holds an address in node-z's blocks.
	return store.Node{Name: name, Blocks: []ipam.Block{b4, b6}, Handles: []ipam.Handle{h1, h2, h3},
		Loans: []store.Loan{{Handle: h2.ID, Lender: "node-z"}}}
}

// sameNode fails t unless got is want (content and, when set, version).
func sameNode(t testing.TB, got, want store.Node) {
	t.Helper()
	got, want = withVersion(got.Normalized(), got.Version), withVersion(want.Normalized(), want.Version)
	g, err := store.MarshalNode(got)
	if err != nil {
		t.Fatalf("read back an invalid node object: %v", err)
	}
	w, err := store.MarshalNode(want)
	if err != nil {
		t.Fatal(err)
	}
	if string(g) != string(w) {
		t.Fatalf("node object read back:\n  %s\nwant:\n  %s", g, w)
	}
	for i := range want.Handles {
		gh, wh := got.Handles[i], want.Handles[i]
		if gh.Network != wh.Network || gh.ContainerID != wh.ContainerID || gh.IfName != wh.IfName || gh.Node != wh.Node || !gh.Created.Equal(wh.Created) {
			t.Fatalf("handle %q read back as %+v, want %+v", wh.ID, gh, wh)
		}
	}
	if want.Version != "" && got.Version != want.Version {
		t.Fatalf("version %q, want %q", got.Version, want.Version)
	}
}

func withVersion(n store.Node, v store.Version) store.Node {
	n.Version = v
	return n
}
