package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ipkeeper/ipkeeper/internal/blockroute"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// RouteProtocol is the routing protocol number (rtm_protocol, "proto" in
// `ip route`) of every route the agent programs: it removes only routes
// of this protocol, and never changes a route of another. 201 is outside
// the numbers /etc/iproute2/rt_protos gives to daemons (FRR's are
// 186-198); name it there as "ipkeeper" to see it by name.
const RouteProtocol = 201

// RouteReconciler makes the main table's routes of RouteProtocol in one
// network namespace equal the wanted set.
type RouteReconciler struct {
	// Handle reaches the namespace (netlink.NewHandle: the caller's,
	// netlink.NewHandleAt: another).
	Handle *netlink.Handle
	Log    *slog.Logger
}

// RouteChanges counts what Reconcile changed.
type RouteChanges struct {
	Added, Replaced, Removed int
	// Refused are wanted destinations another protocol's route holds.
	Refused []netip.Prefix
}

// Reconcile adds the wanted routes that are missing, replaces those of
// RouteProtocol whose gateway changed, and deletes those of RouteProtocol
// that are not wanted. A destination that a route of another protocol
// holds in the main table (a connected route, an administrator's) is left
// to it and reported in Refused. It returns the first error after trying
// every change.
func (r *RouteReconciler) Reconcile(wanted []blockroute.Route) (RouteChanges, error) {
	var ch RouteChanges
	var errs []error
	for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
		current, err := r.Handle.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return ch, fmt.Errorf("list routes: %w", err)
		}
		mine := map[netip.Prefix]netlink.Route{}
		foreign := map[netip.Prefix]bool{}
		for _, rt := range current {
			dst, ok := prefixOf(rt.Dst)
			if !ok {
				continue
			}
			if rt.Protocol == RouteProtocol {
				mine[dst] = rt
			} else {
				foreign[dst] = true
			}
		}
		want := map[netip.Prefix]bool{}
		for _, w := range wanted {
			if (fam == unix.AF_INET) != w.Dst.Addr().Is4() {
				continue
			}
			want[w.Dst] = true
			old, have := mine[w.Dst]
			if !have && foreign[w.Dst] {
				ch.Refused = append(ch.Refused, w.Dst)
				r.Log.Warn("route not programmed: another protocol's route holds its destination", "dst", w.Dst, "via", w.Via, "node", w.Node)
				continue
			}
			if have && addrOf(old.Gw) == w.Via && old.MultiPath == nil {
				continue
			}
			rt := &netlink.Route{Dst: ipNet(w.Dst), Gw: net.IP(w.Via.AsSlice()), Protocol: RouteProtocol, Table: unix.RT_TABLE_MAIN}
			if err := r.Handle.RouteReplace(rt); err != nil {
				errs = append(errs, fmt.Errorf("route %s via %s (node %s): %w", w.Dst, w.Via, w.Node, err))
				continue
			}
			if have {
				ch.Replaced++
				r.Log.Info("route replaced", "dst", w.Dst, "via", w.Via, "was", addrOf(old.Gw), "node", w.Node)
			} else {
				ch.Added++
				r.Log.Info("route added", "dst", w.Dst, "via", w.Via, "node", w.Node)
			}
		}
		for dst, rt := range mine {
			if want[dst] {
				continue
			}
			if err := r.Handle.RouteDel(&rt); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("delete route %s: %w", dst, err))
				continue
			}
			ch.Removed++
			r.Log.Info("route removed", "dst", dst, "via", addrOf(rt.Gw))
		}
	}
	return ch, errors.Join(errs...)
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones).Masked(), true
}

func addrOf(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// RouteSync keeps a node's routes to the other nodes' blocks in step with
// the datastore: each Sync lists the claims and node objects, computes the
// routes (blockroute.Compute, Wanted) and reconciles.
type RouteSync struct {
	// Node is the node the routes are programmed on.
	Node string
	// List reads every claim and node object.
	List func(ctx context.Context) ([]store.Claim, []store.Node, error)
	// Addresses returns the nodes' addresses.
	Addresses  func() blockroute.Addresses
	Reconciler *RouteReconciler
	Log        *slog.Logger
}

// Sync reconciles once. The routes of nodes whose address is unknown are
// left out (and so removed), with a warning; nothing changes when the
// datastore cannot be read.
func (s *RouteSync) Sync(ctx context.Context) (RouteChanges, error) {
	claims, nodes, err := s.List(ctx)
	if err != nil {
		return RouteChanges{}, fmt.Errorf("read claims and node objects: %w", err)
	}
	routes, err := blockroute.Compute(claims, nodes, s.Addresses())
	var ue *blockroute.UnknownError
	if errors.As(err, &ue) {
		for _, u := range ue.Unknown {
			if u.Node != s.Node {
				s.Log.Warn("no route to a node's blocks: its address is unknown", "to", u.Node, "family", u.Family, "destinations", len(u.Dsts))
			}
		}
	} else if err != nil {
		return RouteChanges{}, err
	}
	wanted, conflicts := blockroute.Wanted(routes, s.Node)
	for _, c := range conflicts {
		s.Log.Warn("no route: several nodes hold the destination", "dst", c.Dst, "nodes", c.Nodes)
	}
	return s.Reconciler.Reconcile(wanted)
}

// Run syncs at once, then every resync and whenever trigger fires, until
// ctx ends.
func (s *RouteSync) Run(ctx context.Context, resync time.Duration, trigger <-chan struct{}) {
	t := time.NewTicker(resync)
	defer t.Stop()
	for {
		if _, err := s.Sync(ctx); err != nil && ctx.Err() == nil {
			s.Log.Error("route sync failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-trigger:
		}
	}
}
