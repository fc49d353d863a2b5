package blockroute

import (
	"errors"
	"net/netip"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func ip(s string) netip.Addr    { return netip.MustParseAddr(s) }

func claim(node, pool, cidr string) store.Claim {
	return store.Claim{BlockRef: store.BlockRef{Pool: pool, CIDR: pfx(cidr)}, Node: node}
}

// lender is node object name holding a record of borrower's handle with
// addrs in block.
func lender(name, borrower, pool, block string, addrs ...string) store.Node {
	h := ipam.Handle{ID: "net." + borrower + ".eth0", Node: borrower}
	for _, a := range addrs {
		h.IPs = append(h.IPs, ipam.HandleIP{Addr: ip(a), Pool: pool, Block: pfx(block)})
	}
	own := ipam.Handle{ID: "net.own.eth0", Node: name, IPs: []ipam.HandleIP{{Addr: ip(addrs[0]).Next(), Pool: pool, Block: pfx(block)}}}
	return store.Node{Name: name, Handles: []ipam.Handle{own, h}}
}

var addrs = Addresses{
	"a": {ip("192.0.2.1"), ip("2001:db8::1")},
	"b": {ip("2001:db8::2"), ip("192.0.2.2")},
	"c": {ip("192.0.2.3")},
}

func TestCompute(t *testing.T) {
	claims := []store.Claim{
		claim("b", "p6", "fd00::40/122"),
		claim("a", "p4", "10.0.0.0/26"),
		claim("b", "p4", "10.0.0.64/26"),
		claim(store.UnaffineNode, "p4", "10.0.0.192/26"),
		claim("a", "p6", "fd00::/122"),
	}
	nodes := []store.Node{lender("a", "b", "p4", "10.0.0.0/26", "10.0.0.9"), lender("b", "a", "p6", "fd00::40/122", "fd00::45")}
	got, err := Compute(claims, nodes, addrs)
	if err != nil {
		t.Fatal(err)
	}
	want := []Route{
		{Node: "a", Dst: pfx("10.0.0.0/26"), Via: ip("192.0.2.1"), Pool: "p4", Kind: KindBlock},
		{Node: "a", Dst: pfx("fd00::/122"), Via: ip("2001:db8::1"), Pool: "p6", Kind: KindBlock},
		{Node: "a", Dst: pfx("fd00::45/128"), Via: ip("2001:db8::1"), Pool: "p6", Kind: KindBorrowed},
		{Node: "b", Dst: pfx("10.0.0.9/32"), Via: ip("192.0.2.2"), Pool: "p4", Kind: KindBorrowed},
		{Node: "b", Dst: pfx("10.0.0.64/26"), Via: ip("192.0.2.2"), Pool: "p4", Kind: KindBlock},
		{Node: "b", Dst: pfx("fd00::40/122"), Via: ip("2001:db8::2"), Pool: "p6", Kind: KindBlock},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Compute:\n got %v\nwant %v", got, want)
	}
}

func TestComputeUnknown(t *testing.T) {
	claims := []store.Claim{claim("c", "p6", "fd00::80/122"), claim("c", "p4", "10.0.0.128/26"), claim("d", "p4", "10.0.1.0/26"), claim("a", "p4", "10.0.0.0/26")}
	got, err := Compute(claims, nil, addrs)
	var ue *UnknownError
	if !errors.As(err, &ue) || !errors.Is(err, ErrUnknownAddress) {
		t.Fatalf("Compute with nodes of unknown addresses: err %v, want an UnknownError", err)
	}
	want := []Unknown{{Node: "c", Family: 6, Dsts: []netip.Prefix{pfx("fd00::80/122")}}, {Node: "d", Family: 4, Dsts: []netip.Prefix{pfx("10.0.1.0/26")}}}
	if !reflect.DeepEqual(ue.Unknown, want) {
		t.Fatalf("unknown: got %+v, want %+v", ue.Unknown, want)
	}
	if msg := err.Error(); msg != `node address unknown: node "c" has no known IPv6 address (it holds fd00::80/122); node "d" has no known IPv4 address (it holds 10.0.1.0/26)` {
		t.Fatalf("message: %s", msg)
	}
	if len(got) != 2 || got[0].Node != "a" || got[1].Node != "c" {
		t.Fatalf("the routes that could be made: %v", got)
	}
}

func TestWanted(t *testing.T) {
	r := func(node, dst, via string) Route {
		return Route{Node: node, Dst: pfx(dst), Via: ip(via), Kind: KindBlock}
	}
	for _, tc := range []struct {
		name      string
		routes    []Route
		self      string
		want      []Route
		conflicts []Conflict
	}{
		{name: "other nodes' blocks only",
			routes: []Route{r("a", "10.0.0.0/26", "192.0.2.1"), r("b", "10.0.0.64/26", "192.0.2.2"), r("c", "10.0.0.128/26", "192.0.2.3")},
			self:   "a",
			want:   []Route{r("b", "10.0.0.64/26", "192.0.2.2"), r("c", "10.0.0.128/26", "192.0.2.3")}},
		{name: "nothing of its own",
			routes: []Route{r("b", "10.0.0.64/26", "192.0.2.2")},
			self:   "z",
			want:   []Route{r("b", "10.0.0.64/26", "192.0.2.2")}},
		{name: "a block it holds too (overlapping pools) is never routed away",
			routes: []Route{r("a", "10.0.0.0/26", "192.0.2.1"), r("b", "10.0.0.0/26", "192.0.2.2")},
			self:   "a"},
		{name: "never via its own address",
			routes: []Route{r("a", "10.0.0.0/26", "192.0.2.1"), r("b", "10.0.0.64/26", "192.0.2.1")},
			self:   "a"},
		{name: "a destination two other nodes hold is a conflict",
			routes:    []Route{r("b", "10.0.0.0/26", "192.0.2.2"), r("c", "10.0.0.0/26", "192.0.2.3"), r("c", "10.0.0.128/26", "192.0.2.3")},
			self:      "a",
			want:      []Route{r("c", "10.0.0.128/26", "192.0.2.3")},
			conflicts: []Conflict{{Dst: pfx("10.0.0.0/26"), Nodes: []string{"b", "c"}}}},
		{name: "an address borrowed from its block goes to the borrower",
			routes: []Route{r("a", "10.0.0.0/26", "192.0.2.1"), {Node: "b", Dst: pfx("10.0.0.9/32"), Via: ip("192.0.2.2"), Kind: KindBorrowed}},
			self:   "a",
			want:   []Route{{Node: "b", Dst: pfx("10.0.0.9/32"), Via: ip("192.0.2.2"), Kind: KindBorrowed}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, conflicts := Wanted(tc.routes, tc.self)
			if !reflect.DeepEqual(got, tc.want) || !reflect.DeepEqual(conflicts, tc.conflicts) {
				t.Fatalf("Wanted(%q):\n got %v %v\nwant %v %v", tc.self, got, conflicts, tc.want, tc.conflicts)
			}
		})
	}
}

func TestParseAddressAndMerge(t *testing.T) {
	for _, bad := range []string{"a", "=192.0.2.1", "a=", "a=host", "a=fe80::1%eth0", "a=0.0.0.0"} {
		if _, _, err := ParseAddress(bad); err == nil {
			t.Errorf("ParseAddress(%q) succeeded", bad)
		}
	}
	n, a, err := ParseAddress("node-a=::ffff:192.0.2.1")
	if err != nil || n != "node-a" || a != ip("192.0.2.1") {
		t.Fatalf("ParseAddress: %q %v %v", n, a, err)
	}
	got := Merge(Addresses{"a": {ip("192.0.2.1"), ip("2001:db8::1")}, "b": {ip("192.0.2.2")}}, Addresses{"a": {ip("198.51.100.1")}, "c": {ip("192.0.2.3")}})
	want := Addresses{"a": {ip("198.51.100.1"), ip("2001:db8::1")}, "b": {ip("192.0.2.2")}, "c": {ip("192.0.2.3")}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Merge: got %v, want %v", got, want)
	}
}

func TestNodeAddresses(t *testing.T) {
	n := &corev1.Node{Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeHostName, Address: "node-a"},
		{Type: corev1.NodeExternalIP, Address: "203.0.113.1"},
		{Type: corev1.NodeInternalIP, Address: "192.0.2.1"},
		{Type: corev1.NodeInternalIP, Address: "192.0.2.99"},
		{Type: corev1.NodeInternalIP, Address: "2001:db8::1"},
	}}}
	if got, want := NodeAddresses(n), []netip.Addr{ip("192.0.2.1"), ip("2001:db8::1")}; !reflect.DeepEqual(got, want) {
		t.Fatalf("NodeAddresses: got %v, want %v", got, want)
	}
}
