package e2e

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/ipkeeper/ipkeeper/internal/agent"
	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/blockroute"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// routeNode is a namespace standing in for a node, with its route sync.
type routeNode struct {
	name string
	h    *host
	r    *runtime
	sync *agent.RouteSync
}

// withStore opens the local store at dir for f (and closes it again, so
// the plugins can take its lock).
func withStore(t *testing.T, dir string, f func(st store.Store) error) error {
	t.Helper()
	st, err := datastore.Open(ctxT(t), config.Datastore{Type: config.DatastoreLocal, Path: dir}, datastore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	return f(st)
}

// protoRoutes lists the IPv4 routes of agent.RouteProtocol in the
// namespace as "DST via GW".
func protoRoutes(t *testing.T, ns string) []string {
	t.Helper()
	out := nsExec(t, ns, "ip", "-4", "route", "show", "proto", "201")
	var rs []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(l); len(f) >= 3 {
			rs = append(rs, f[0]+" via "+f[2])
		}
	}
	return rs
}

// TestBlockRoutesAcrossNodes runs two nodes (namespaces joined by a veth
// link) with the bridge plugin and ipkeeper on one local store: after each
// node's route sync the pod on node-a reaches the pod on node-b by ping;
// an administrator's route is left alone; when node-b's block is freed its
// route goes, when node-c claims it the route goes via node-c, and when
// node-c's address changes the route follows.
func TestBlockRoutesAcrossNodes(t *testing.T) {
	needRoot(t)
	needIpkeeper(t)
	dir := t.TempDir()
	addrs := blockroute.Addresses{
		"node-a": {mustAddr("192.0.2.1")}, "node-b": {mustAddr("192.0.2.2")}, "node-c": {mustAddr("192.0.2.3")},
	}
	list := func(ctx context.Context) (cs []store.Claim, ns []store.Node, err error) {
		err = withStore(t, dir, func(st store.Store) error {
			if cs, err = st.ListClaims(ctx, store.ClaimSelector{}); err != nil {
				return err
			}
			ns, err = st.ListNodes(ctx, store.NodeSelector{})
			return err
		})
		return cs, ns, err
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var nodes []*routeNode
	for _, name := range []string{"node-a", "node-b"} {
		h := newHost(t, ipkeeperBin)
		nsExec(t, h.ns, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward")
		r := newRuntime(t, h, bridgeConf("ipk-e2e-routes", "1.1.0", true, localIPAM(dir, map[string]any{
			"nodeName": name, "blockSize": 28,
			"ranges": [][]map[string]any{{{"subnet": "10.97.0.0/24"}}},
		})))
		nsh, err := netns.GetFromName(h.ns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nsh.Close() })
		nl, err := netlink.NewHandleAt(nsh, unix.NETLINK_ROUTE)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nl.Close)
		nodes = append(nodes, &routeNode{name: name, h: h, r: r, sync: &agent.RouteSync{
			Node: name, List: list, Addresses: func() blockroute.Addresses { return addrs },
			Reconciler: &agent.RouteReconciler{Handle: nl, Log: log}, Log: log,
		}})
	}
	a, b := nodes[0], nodes[1]
	nsExec(t, a.h.ns, "ip", "link", "add", "ipk-va", "type", "veth", "peer", "name", "ipk-vb", "netns", b.h.ns)
	nsExec(t, a.h.ns, "ip", "addr", "add", "192.0.2.1/24", "dev", "ipk-va")
	nsExec(t, b.h.ns, "ip", "addr", "add", "192.0.2.2/24", "dev", "ipk-vb")
	nsExec(t, a.h.ns, "ip", "link", "set", "ipk-va", "up")
	nsExec(t, b.h.ns, "ip", "link", "set", "ipk-vb", "up")
	// An administrator's route on node-a, of another protocol.
	nsExec(t, a.h.ns, "ip", "route", "add", "10.96.5.0/24", "via", "192.0.2.2", "proto", "static")

	podA, podB := a.r.mustAdd(t, "routes-a"), b.r.mustAdd(t, "routes-b")
	addrA, addrB := podA.addr4(t), podB.addr4(t)
	blockA, blockB := netip.PrefixFrom(addrA, 28).Masked(), netip.PrefixFrom(addrB, 28).Masked()
	if blockA == blockB {
		t.Fatalf("both pods in block %s", blockA)
	}
	sync := func(n *routeNode) {
		t.Helper()
		if _, err := n.sync.Sync(ctxT(t)); err != nil {
			t.Fatalf("route sync on %s: %v", n.name, err)
		}
	}
	// The pods see the pool's whole subnet on-link: each bridge answers
	// ARP for the other node's pods (proxy ARP), as on a real node.
	for _, n := range nodes {
		nsExec(t, n.h.ns, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/conf/ipk0/proxy_arp")
	}
	// Without the routes node-b's pod cannot answer.
	if out, err := nsRun(podA.ns, "ping", "-c1", "-W1", addrB.String()); err == nil {
		t.Fatalf("ping %s from node-a's pod before any route sync succeeded: %s", addrB, out)
	}
	sync(a)
	sync(b)
	want := func(n *routeNode, routes ...string) {
		t.Helper()
		if got := protoRoutes(t, n.h.ns); !slices.Equal(got, routes) {
			t.Fatalf("%s's routes of protocol 201: %q, want %q", n.name, got, routes)
		}
	}
	want(a, blockB.String()+" via 192.0.2.2")
	want(b, blockA.String()+" via 192.0.2.1")
	t.Logf("node-a's routes of protocol 201: %q; node-b's: %q", protoRoutes(t, a.h.ns), protoRoutes(t, b.h.ns))
	t.Logf("from node-a's pod %s: %s", addrA, firstLines(ping(t, podA.ns, addrB.String()), 2))
	t.Logf("from node-b's pod %s: %s", addrB, firstLines(ping(t, podB.ns, addrA.String()), 2))

	// node-b's pod goes and its empty block is freed: the route goes.
	if err := b.r.del(t, podB); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	var pool string
	if err := withStore(t, dir, func(st store.Store) error {
		if _, err := allocator.New(st, nil).FreeNodeBlocks(ctxT(t), "node-b"); err != nil {
			return err
		}
		cs, err := st.ListClaims(ctxT(t), store.ClaimSelector{Node: "node-a"})
		if len(cs) == 1 {
			pool = cs[0].Pool
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	sync(a)
	want(a)
	if out := nsExec(t, a.h.ns, "ip", "-4", "route", "show", "10.96.5.0/24"); !strings.Contains(out, "proto static") {
		t.Fatalf("the administrator's route is gone from node-a: %q", out)
	}

	// node-c claims the block: node-a's route to it goes via node-c.
	if err := withStore(t, dir, func(st store.Store) error {
		got, err := allocator.New(st, nil).Allocate(ctxT(t), allocator.Request{
			Handle: ipam.Handle{ID: "net.c.eth0", Network: "net", ContainerID: "c", IfName: "eth0", Node: "node-c"},
			Sets:   [][]string{{pool}}})
		if err == nil && got.IPs[0].Block != blockB {
			t.Fatalf("node-c got block %s, want node-b's former %s", got.IPs[0].Block, blockB)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// An administrator's route holds the destination: it is left alone
	// until it goes.
	nsExec(t, a.h.ns, "ip", "route", "add", blockB.String(), "via", "192.0.2.2", "proto", "static")
	ch, err := a.sync.Sync(ctxT(t))
	if err != nil || len(ch.Refused) != 1 || ch.Refused[0] != blockB {
		t.Fatalf("sync with an administrator's route to %s: %+v, %v", blockB, ch, err)
	}
	want(a)
	if out := nsExec(t, a.h.ns, "ip", "-4", "route", "show", blockB.String()); !strings.Contains(out, "via 192.0.2.2 dev ipk-va proto static") {
		t.Fatalf("the administrator's route to %s was changed: %q", blockB, out)
	}
	nsExec(t, a.h.ns, "ip", "route", "del", blockB.String(), "proto", "static")
	sync(a)
	want(a, blockB.String()+" via 192.0.2.3")

	// node-c's address changes: the route is replaced.
	addrs["node-c"] = []netip.Addr{mustAddr("192.0.2.4")}
	sync(a)
	want(a, blockB.String()+" via 192.0.2.4")
}

// firstLines is the first n lines of s, joined by " | ".
func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[:min(n, len(lines))], " | ")
}
