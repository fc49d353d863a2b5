package leaks

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

var t0 = time.Date(2025, 6, 7, 8, 0, 0, 0, time.UTC)

// family holds the addresses of one IP family for the table tests.
type family struct {
	name       string
	a1, a2, a3 netip.Addr
}

var families = []family{
	{"IPv4", netip.MustParseAddr("10.1.0.5"), netip.MustParseAddr("10.1.0.6"), netip.MustParseAddr("10.1.0.7")},
	{"IPv6", netip.MustParseAddr("fd00::5"), netip.MustParseAddr("fd00::6"), netip.MustParseAddr("fd00::7")},
}

// cluster is a Cluster for tests: a Snapshot plus nodes seen earlier.
type cluster struct {
	*Snapshot
	known []string
}

func (c cluster) NodeWasKnown(n string) bool { return c.NodeExists(n) || slices.Contains(c.known, n) }

func handle(container string, ns, pod, uid string, created time.Time, addrs ...netip.Addr) ipam.Handle {
	h := ipam.Handle{ID: ipam.HandleID("net", container, "eth0"), Network: "net", ContainerID: container, IfName: "eth0",
		Node: "node-a", Namespace: ns, Pod: pod, PodUID: uid, Created: created}
	for _, a := range addrs {
		h.IPs = append(h.IPs, ipam.HandleIP{Addr: a, Pool: "p"})
	}
	return h
}

func running(ns, name, uid, node string, ips ...netip.Addr) Pod {
	return Pod{Namespace: ns, Name: name, UID: uid, Node: node, Phase: "Running", IPs: ips}
}

func TestFind(t *testing.T) {
	type tc struct {
		name    string
		handles []ipam.Handle
		pods    []Pod
		nodes   []string
		known   []string
		want    map[string]Reason // container ID -> reason; absent: kept
	}
	for _, f := range families {
		cases := []tc{
			{name: "live pod kept",
				handles: []ipam.Handle{handle("c1", "ns", "web", "u1", t0, f.a1)},
				pods:    []Pod{running("ns", "web", "u1", "node-a", f.a1)}, nodes: []string{"node-a"}},
			{name: "pod gone",
				handles: []ipam.Handle{handle("c1", "ns", "web", "u1", t0, f.a1)},
				pods:    []Pod{running("ns", "other", "u2", "node-a")}, nodes: []string{"node-a"},
				want: map[string]Reason{"c1": PodGone}},
			{name: "pod of the same name in another namespace does not keep it",
				handles: []ipam.Handle{handle("c1", "ns", "web", "u1", t0, f.a1)},
				pods:    []Pod{running("ns2", "web", "u1", "node-a")}, nodes: []string{"node-a"},
				want: map[string]Reason{"c1": PodGone}},
			{name: "statefulset pod recreated: old UID leaked, new UID kept",
				handles: []ipam.Handle{handle("c1", "ns", "db-0", "u1", t0, f.a1), handle("c2", "ns", "db-0", "u2", t0.Add(time.Minute), f.a2)},
				pods:    []Pod{running("ns", "db-0", "u2", "node-a", f.a2)}, nodes: []string{"node-a"},
				want: map[string]Reason{"c1": PodReplaced}},
			{name: "recreated pod without status IPs yet keeps its new address",
				handles: []ipam.Handle{handle("c2", "ns", "db-0", "u2", t0, f.a2)},
				pods:    []Pod{{Namespace: "ns", Name: "db-0", UID: "u2", Node: "node-a", Phase: "Pending"}}, nodes: []string{"node-a"}},
			{name: "succeeded and failed pods",
				handles: []ipam.Handle{handle("c1", "ns", "job-1", "u1", t0, f.a1), handle("c2", "ns", "job-2", "u2", t0, f.a2)},
				pods: []Pod{{Namespace: "ns", Name: "job-1", UID: "u1", Node: "node-a", Phase: "Succeeded"},
					{Namespace: "ns", Name: "job-2", UID: "u2", Node: "node-a", Phase: "Failed"}},
				nodes: []string{"node-a"},
				want:  map[string]Reason{"c1": PodFinished, "c2": PodFinished}},
			{name: "pod on a deleted node",
				handles: []ipam.Handle{handle("c1", "ns", "web", "u1", t0, f.a1)},
				pods:    []Pod{running("ns", "web", "u1", "node-b", f.a1)}, nodes: []string{"node-a"},
				want: map[string]Reason{"c1": NodeGone}},
			{name: "no node at all listed: node rule suspended",
				handles: []ipam.Handle{handle("c1", "ns", "web", "u1", t0, f.a1), handle("c2", "", "", "", t0, f.a2)},
				pods:    []Pod{running("ns", "web", "u1", "node-b", f.a1)}, known: []string{"node-a"}},
			{name: "the handle's own node name is not the pod's node: pod's node decides",
				handles: []ipam.Handle{handle("c1", "ns", "web", "u1", t0, f.a1)}, // handle records node-a
				pods:    []Pod{running("ns", "web", "u1", "node-a.example.com", f.a1)}, nodes: []string{"node-a.example.com"}},
			{name: "no pod identity: node never known is kept",
				handles: []ipam.Handle{handle("c1", "", "", "", t0, f.a1)}, nodes: []string{"node-z"}},
			{name: "no pod identity: node known and gone",
				handles: []ipam.Handle{handle("c1", "", "", "", t0, f.a1)}, nodes: []string{"node-z"}, known: []string{"node-a"},
				want: map[string]Reason{"c1": NodeGone}},
			{name: "no pod identity: node alive",
				handles: []ipam.Handle{handle("c1", "", "", "", t0, f.a1)}, nodes: []string{"node-a"}},
			{name: "namespace without pod name is no pod identity",
				handles: []ipam.Handle{handle("c1", "ns", "", "u1", t0, f.a1)}, nodes: []string{"node-a"}},
			{name: "no UID recorded: running pod of that name keeps it",
				handles: []ipam.Handle{handle("c1", "ns", "web", "", t0, f.a1)},
				pods:    []Pod{running("ns", "web", "u9", "node-a")}, nodes: []string{"node-a"}},
			{name: "no UID recorded: pod gone or finished",
				handles: []ipam.Handle{handle("c1", "ns", "web", "", t0, f.a1), handle("c2", "ns", "job", "", t0, f.a2)},
				pods:    []Pod{{Namespace: "ns", Name: "job", UID: "u9", Phase: "Succeeded"}}, nodes: []string{"node-a"},
				want: map[string]Reason{"c1": PodGone, "c2": PodFinished}},
			{name: "sandbox recreated: older leaked, newest kept",
				handles: []ipam.Handle{handle("c1", "ns", "web", "u1", t0, f.a1), handle("c2", "ns", "web", "u1", t0.Add(time.Second), f.a2),
					handle("c3", "ns", "web", "u1", t0.Add(2*time.Second), f.a3)},
				pods: []Pod{running("ns", "web", "u1", "node-a", f.a3)}, nodes: []string{"node-a"},
				want: map[string]Reason{"c1": OldSandbox, "c2": OldSandbox}},
			{name: "sandbox recreated but the pod still reports the old address",
				handles: []ipam.Handle{handle("c1", "ns", "web", "u1", t0, f.a1), handle("c2", "ns", "web", "u1", t0.Add(time.Second), f.a2)},
				pods:    []Pod{running("ns", "web", "u1", "node-a", f.a1)}, nodes: []string{"node-a"}},
			{name: "sandbox recreated, status not updated yet: still only the older",
				handles: []ipam.Handle{handle("c1", "ns", "web", "u1", t0, f.a1), handle("c2", "ns", "web", "u1", t0.Add(time.Second), f.a2)},
				pods:    []Pod{running("ns", "web", "u1", "node-a")}, nodes: []string{"node-a"},
				want: map[string]Reason{"c1": OldSandbox}},
			{name: "same creation time: neither is older",
				handles: []ipam.Handle{handle("c1", "ns", "web", "u1", t0, f.a1), handle("c2", "ns", "web", "u1", t0, f.a2)},
				pods:    []Pod{running("ns", "web", "u1", "node-a")}, nodes: []string{"node-a"}},
			{name: "unknown creation time is never older",
				handles: []ipam.Handle{handle("c1", "ns", "web", "u1", time.Time{}, f.a1), handle("c2", "ns", "web", "u1", t0, f.a2)},
				pods:    []Pod{running("ns", "web", "u1", "node-a")}, nodes: []string{"node-a"}},
		}
		// Other interfaces and networks of one pod are not sandboxes of each other.
		eth1 := handle("c1", "ns", "web", "u1", t0, f.a1)
		eth1.IfName, eth1.ID = "net1", ipam.HandleID("net", "c1", "net1")
		other := handle("c1", "ns", "web", "u1", t0, f.a2)
		other.Network, other.ID = "net2", ipam.HandleID("net2", "c1", "eth0")
		cases = append(cases, tc{name: "other interface and network are not older sandboxes",
			handles: []ipam.Handle{eth1, other, handle("c2", "ns", "web", "u1", t0.Add(time.Second), f.a3)},
			pods:    []Pod{running("ns", "web", "u1", "node-a", f.a3)}, nodes: []string{"node-a"}})
		for _, c := range cases {
			t.Run(f.name+"/"+c.name, func(t *testing.T) {
				got := map[string]Reason{}
				for _, l := range Find(c.handles, cluster{NewSnapshot(c.pods, c.nodes), c.known}) {
					key := l.Handle.ContainerID
					if l.Handle.IfName != "eth0" || l.Handle.Network != "net" {
						key += "/" + l.Handle.Network + "/" + l.Handle.IfName
					}
					got[key] = l.Reason
					if l.Detail == "" {
						t.Errorf("%s: no detail", key)
					}
				}
				want := c.want
				if want == nil {
					want = map[string]Reason{}
				}
				if len(got) != len(want) {
					t.Fatalf("leaks %v, want %v", got, want)
				}
				for k, r := range want {
					if got[k] != r {
						t.Errorf("%s: %q, want %q (all: %v)", k, got[k], r, got)
					}
				}
			})
		}
	}
}

func TestLeakNode(t *testing.T) {
	a := netip.MustParseAddr("10.1.0.5")
	pods := []Pod{running("ns", "web", "u1", "node-b", a), {Namespace: "ns", Name: "job", UID: "u2", Node: "node-c", Phase: "Failed"}}
	hs := []ipam.Handle{handle("c1", "ns", "web", "u1", t0, a), handle("c2", "ns", "job", "u2", t0, a), handle("c3", "ns", "gone", "u3", t0, a)}
	ls := Find(hs, NewSnapshot(pods, []string{"node-c"}))
	want := []string{"node-b", "node-c", "node-a"} // the pod's node when known, else the handle's
	if len(ls) != 3 {
		t.Fatalf("leaks %+v", ls)
	}
	for i, l := range ls {
		if l.Node != want[i] {
			t.Errorf("%s: node %q, want %q", l.Handle.ContainerID, l.Node, want[i])
		}
	}
}

func TestCheckHasNoSandboxRule(t *testing.T) {
	a, b := netip.MustParseAddr("10.1.0.5"), netip.MustParseAddr("10.1.0.6")
	s := NewSnapshot([]Pod{running("ns", "web", "u1", "node-a")}, []string{"node-a"})
	if l, ok := Check(handle("c1", "ns", "web", "u1", t0, a), s); ok {
		t.Errorf("Check: %+v", l)
	}
	if _, ok := Check(handle("c1", "ns", "gone", "u1", t0, b), s); !ok {
		t.Error("Check: gone pod not leaked")
	}
}

// TestFindSkipsParkedReservations: a parked sticky reservation is no
// pod's leak (the controller's sticky lifecycle frees it); a live sticky
// allocation of a gone pod is found like any other.
func TestFindSkipsParkedReservations(t *testing.T) {
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			parked := handle("c1", "db", "pg-0", "u1", t0, f.a1)
			parked.Sticky, parked.Parked = "pod/db/pg-0", t0.Add(time.Minute)
			live := handle("c2", "db", "pg-1", "u2", t0, f.a2)
			live.Sticky = "pod/db/pg-1"
			ls := Find([]ipam.Handle{parked, live}, NewSnapshot(nil, []string{"node-a"}))
			if len(ls) != 1 || ls[0].Handle.ID != live.ID || ls[0].Reason != PodGone {
				t.Fatalf("%+v", ls)
			}
		})
	}
}
