// Package blockroute computes the routes that make pods of one node
// reachable from the others on a flat network (host-gateway routing): one
// route per claimed block via the address of the node holding it, and one
// host route (/32, /128) per address a node borrowed in another node's
// block, via the borrower. ipkeeperctl routes prints them; the agent's
// route mode programs those of the other nodes into its node's kernel.
package blockroute

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// ErrUnknownAddress: a node holds blocks or borrowed addresses of a family
// for which no address of the node is known.
var ErrUnknownAddress = errors.New("node address unknown")

// Kinds of route.
const (
	// KindBlock routes a block a node claimed.
	KindBlock = "block"
	// KindBorrowed routes one address a node borrowed in another node's
	// block.
	KindBorrowed = "borrowed"
)

// Route is one destination held by a node, reached via the node's address.
type Route struct {
	// Node holds Dst.
	Node string
	// Dst is a block, or a borrowed address as a host prefix.
	Dst netip.Prefix
	// Via is Node's address of Dst's family.
	Via netip.Addr
	// Pool is the pool of the block (of the lender's block when
	// borrowed).
	Pool string
	// Kind is KindBlock or KindBorrowed.
	Kind string
}

// String is "DST via VIA (node NODE)".
func (r Route) String() string {
	return r.Dst.String() + " via " + r.Via.String() + " (node " + r.Node + ")"
}

// Addresses are the known addresses of nodes by name, any family.
type Addresses map[string][]netip.Addr

// For returns the first of node's addresses in dst's family.
func (a Addresses) For(node string, dst netip.Prefix) (netip.Addr, bool) {
	for _, ip := range a[node] {
		if ip.Is4() == dst.Addr().Is4() {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// Unknown is a node with something to route in a family for which no
// address of it is known.
type Unknown struct {
	Node string
	// Family is 4 or 6.
	Family int
	// Dsts is what could not be routed.
	Dsts []netip.Prefix
}

// UnknownError reports every unknown node address; it wraps
// ErrUnknownAddress.
type UnknownError struct{ Unknown []Unknown }

func (e *UnknownError) Error() string {
	var parts []string
	for _, u := range e.Unknown {
		parts = append(parts, fmt.Sprintf("node %q has no known IPv%d address (it holds %s)", u.Node, u.Family, prefixes(u.Dsts)))
	}
	return ErrUnknownAddress.Error() + ": " + strings.Join(parts, "; ")
}

func (e *UnknownError) Unwrap() error { return ErrUnknownAddress }

func prefixes(ps []netip.Prefix) string {
	const most = 3
	var s []string
	for i, p := range ps {
		if i == most {
			s = append(s, fmt.Sprintf("and %d more", len(ps)-most))
			break
		}
		s = append(s, p.String())
	}
	return strings.Join(s, ", ")
}

// Compute returns the routes of every block claimed in claims and of every
// borrowed address recorded in nodes (a handle record whose Node is not
// the object's), with addrs giving each node's address, sorted by node,
// family (IPv4 first) and destination. Claims of store.UnaffineNode and
// records naming no node are not routed: no node holds them. When a node
// with something to route has no known address of that family, Compute
// returns the routes it could make and an *UnknownError naming every such
// node.
func Compute(claims []store.Claim, nodes []store.Node, addrs Addresses) ([]Route, error) {
	var out []Route
	unknown := map[[2]string]*Unknown{}
	var order [][2]string
	add := func(r Route) {
		via, ok := addrs.For(r.Node, r.Dst)
		if ok {
			r.Via = via
			out = append(out, r)
			return
		}
		fam := 6
		if r.Dst.Addr().Is4() {
			fam = 4
		}
		k := [2]string{r.Node, fmt.Sprint(fam)}
		u := unknown[k]
		if u == nil {
			u = &Unknown{Node: r.Node, Family: fam}
			unknown[k] = u
			order = append(order, k)
		}
		u.Dsts = append(u.Dsts, r.Dst)
	}
	for _, c := range claims {
		if c.Node == "" || c.Node == store.UnaffineNode {
			continue
		}
		add(Route{Node: c.Node, Dst: c.CIDR.Masked(), Pool: c.Pool, Kind: KindBlock})
	}
	for _, n := range nodes {
		for _, h := range n.Handles {
			if h.Node == n.Name || h.Node == "" || h.Node == store.UnaffineNode {
				continue
			}
			for _, ip := range h.IPs {
				add(Route{Node: h.Node, Dst: netip.PrefixFrom(ip.Addr, ip.Addr.BitLen()), Pool: ip.Pool, Kind: KindBorrowed})
			}
		}
	}
	Sort(out)
	if len(order) == 0 {
		return out, nil
	}
	slices.SortFunc(order, func(a, b [2]string) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	e := &UnknownError{}
	for _, k := range order {
		u := unknown[k]
		slices.SortFunc(u.Dsts, comparePrefix)
		e.Unknown = append(e.Unknown, *u)
	}
	return out, e
}

// Sort orders routes by node, family (IPv4 first), destination and pool.
func Sort(rs []Route) {
	slices.SortFunc(rs, func(a, b Route) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), comparePrefix(a.Dst, b.Dst), cmp.Compare(a.Pool, b.Pool))
	})
}

// comparePrefix orders IPv4 before IPv6, then by address and length.
func comparePrefix(a, b netip.Prefix) int {
	return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
}

// Conflict is a destination two nodes hold (overlapping pools of two
// networks): it cannot be routed to both.
type Conflict struct {
	Dst   netip.Prefix
	Nodes []string
}

// Wanted returns the routes node self programs: those of every other node,
// never one to a destination self holds itself (its own blocks and
// borrowed addresses) nor one via an address of its own, each destination
// once. A destination two other nodes hold is left out and returned as a
// Conflict. routes must be sorted (Compute's).
func Wanted(routes []Route, self string) ([]Route, []Conflict) {
	own := map[netip.Prefix]bool{}
	ownAddr := map[netip.Addr]bool{}
	for _, r := range routes {
		if r.Node == self {
			own[r.Dst] = true
			ownAddr[r.Via] = true
		}
	}
	byDst := map[netip.Prefix][]Route{}
	var dsts []netip.Prefix
	for _, r := range routes {
		if r.Node == self || own[r.Dst] || ownAddr[r.Via] {
			continue
		}
		if _, seen := byDst[r.Dst]; !seen {
			dsts = append(dsts, r.Dst)
		}
		byDst[r.Dst] = append(byDst[r.Dst], r)
	}
	var out []Route
	var conflicts []Conflict
	for _, d := range dsts {
		rs := byDst[d]
		var nodes []string
		for _, r := range rs {
			if !slices.Contains(nodes, r.Node) {
				nodes = append(nodes, r.Node)
			}
		}
		if len(nodes) > 1 {
			conflicts = append(conflicts, Conflict{Dst: d, Nodes: nodes})
			continue
		}
		out = append(out, rs[0])
	}
	slices.SortFunc(out, func(a, b Route) int { return comparePrefix(a.Dst, b.Dst) })
	return out, conflicts
}

// ParseAddress parses NODE=ADDR (a --node-address value).
func ParseAddress(s string) (string, netip.Addr, error) {
	node, addr, ok := strings.Cut(s, "=")
	if !ok || node == "" {
		return "", netip.Addr{}, fmt.Errorf("node address %q: want NODE=ADDR", s)
	}
	ip, err := netip.ParseAddr(addr)
	if err != nil || ip.Zone() != "" || ip.IsUnspecified() {
		return "", netip.Addr{}, fmt.Errorf("node address %q: %q is not an IP address", s, addr)
	}
	return node, ip.Unmap(), nil
}

// Merge returns base with over's addresses taking the place of base's of
// the same family, node by node.
func Merge(base, over Addresses) Addresses {
	out := Addresses{}
	for n, ips := range base {
		out[n] = slices.Clone(ips)
	}
	for n, ips := range over {
		var keep []netip.Addr
		for _, b := range out[n] {
			if !slices.ContainsFunc(ips, func(o netip.Addr) bool { return o.Is4() == b.Is4() }) {
				keep = append(keep, b)
			}
		}
		out[n] = append(slices.Clone(ips), keep...)
	}
	return out
}

// NodeAddresses returns a Node's InternalIP addresses, at most one per
// family, in the order the Node lists them.
func NodeAddresses(n *corev1.Node) []netip.Addr {
	var out []netip.Addr
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		if err != nil || ip.Zone() != "" {
			continue
		}
		ip = ip.Unmap()
		if !slices.ContainsFunc(out, func(o netip.Addr) bool { return o.Is4() == ip.Is4() }) {
			out = append(out, ip)
		}
	}
	return out
}
