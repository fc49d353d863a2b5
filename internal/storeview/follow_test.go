package storeview_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
	"github.com/ipkeeper/ipkeeper/internal/storeview"
	"github.com/ipkeeper/ipkeeper/internal/testenv"
)

var (
	pool4 = ipam.Pool{Name: "v4", CIDR: netip.MustParsePrefix("10.20.0.0/16"), BlockSize: 26}
	pool6 = ipam.Pool{Name: "v6", CIDR: netip.MustParsePrefix("fd00:20::/64"), BlockSize: 122}
)

// fixture is a store on an etcd server of the test's own (compactions
// cut the history other tests would read), reached through a proxy the
// test can cut.
type fixture struct {
	srv   *etcdtest.Server
	proxy *etcdtest.Proxy
	st    *kvbacked.Store
	a     *allocator.Allocator
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	srv := etcdtest.ForTest(t, nil)
	p := etcdtest.NewProxy(t, strings.TrimPrefix(srv.Endpoint, "http://"))
	kvs, err := etcd.Open(t.Context(), etcd.Config{Endpoints: []string{"http://" + p.Addr()}, Prefix: "/views/"})
	if err != nil {
		t.Fatal(err)
	}
	st := kvbacked.New(kvs)
	t.Cleanup(func() { _ = st.Close() })
	return &fixture{srv: srv, proxy: p, st: st, a: allocator.New(st, nil)}
}

// allocate gives a dual-stack handle to a pod on node.
func (f *fixture) allocate(t *testing.T, node, pod string) ipam.Handle {
	t.Helper()
	h, err := f.a.Allocate(t.Context(), allocator.Request{
		Handle: ipam.Handle{ID: "net." + pod + ".eth0", Network: "net", ContainerID: pod, IfName: "eth0", Node: node,
			Namespace: "ns", Pod: pod},
		Sets: [][]string{{"v4"}, {"v6"}}, Define: []ipam.Pool{pool4, pool6}})
	if err != nil {
		t.Fatal(err)
	}
	if len(h.IPs) != 2 || !h.IPs[0].Addr.Is4() || !h.IPs[1].Addr.Is6() {
		t.Fatalf("handle %+v: want an IPv4 and an IPv6 address", h)
	}
	return h
}

// run starts v until the test ends.
func run(t *testing.T, v *storeview.View) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); v.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// waitFor waits until cond holds of the view, checked at each change.
func waitFor(t *testing.T, v *storeview.View, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		_, ch := v.Changed()
		if cond() {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the view never came to %s (synced %v, revision %s, err %v)", what, v.Synced(), v.Revision(), v.Err())
		case <-ch:
		}
	}
}

// atRevision waits until the view is synced at rev or later.
func atRevision(t *testing.T, v *storeview.View, rev int64) {
	t.Helper()
	waitFor(t, v, fmt.Sprintf("revision %d", rev), func() bool {
		r, ok := kvbacked.RevisionOf(v.Revision())
		return v.Synced() && ok && r >= rev
	})
}

// same fails unless the view holds exactly what the store lists now.
func same(t *testing.T, v *storeview.View, st store.Store) {
	t.Helper()
	ctx := t.Context()
	snap := v.Snapshot()
	pools, err := st.ListPools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := st.ListClaims(ctx, store.ClaimSelector{})
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := st.ListNodes(ctx, store.NodeSelector{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := describePools(snap.Pools), describePools(pools); got != want {
		t.Errorf("pools in the view:\n%s\nin the store:\n%s", got, want)
	}
	if got, want := fmt.Sprint(claims), fmt.Sprint(snap.Claims); got != want {
		t.Errorf("claims in the view:\n%s\nin the store:\n%s", got, want)
	}
	if got, want := describeNodes(t, snap.Nodes), describeNodes(t, nodes); got != want {
		t.Errorf("node objects in the view:\n%s\nin the store:\n%s", got, want)
	}
	if len(snap.Bad) > 0 {
		t.Errorf("unreadable objects in the view: %+v", snap.Bad)
	}
}

func describePools(ps []store.Pool) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "%s@%s %s\n", p.Spec.Name, p.Version, p.Spec.CIDR)
	}
	return b.String()
}

func describeNodes(t *testing.T, ns []store.Node) string {
	var b strings.Builder
	for _, n := range ns {
		enc, err := store.MarshalNode(n)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s@%s %s\n", n.Name, n.Version, enc)
	}
	return b.String()
}

// TestViewFollowsEtcd: the view lists once, then follows every change by
// the watch — handles allocated and released (IPv4 and IPv6), node
// objects created and deleted, claims, a pool changed — applying the
// changes of a node's parts in revision order, and holds what the store
// lists, without listing again.
func TestViewFollowsEtcd(t *testing.T) {
	f := newFixture(t)
	for i := range 3 {
		f.allocate(t, "node-a", fmt.Sprintf("pre%d", i))
	}
	src, ok := f.st.Follower()
	if !ok {
		t.Fatal("kvbacked on etcd has no Follower")
	}
	v := storeview.New(src, nil)
	if v.Synced() {
		t.Fatal("a view that has not listed reports synced")
	}
	if err := v.Refresh(t.Context()); !errors.Is(err, storeview.ErrNotSynced) {
		t.Fatalf("Refresh of a view not synced: %v, want ErrNotSynced", err)
	}
	run(t, v)
	waitFor(t, v, "synced", v.Synced)
	same(t, v, f.st)

	// Writes in quick succession to the same node objects, and others.
	var hs []ipam.Handle
	for i := range 20 {
		node := "node-a"
		if i%3 == 0 {
			node = "node-b"
		}
		hs = append(hs, f.allocate(t, node, fmt.Sprintf("pod%d", i)))
	}
	for _, h := range hs[:10] {
		if _, err := f.a.Release(t.Context(), h.Node, h.ID); err != nil {
			t.Fatal(err)
		}
	}
	c, err := f.st.GetClaim(t.Context(), store.BlockRef{Pool: hs[19].IPs[1].Pool, CIDR: hs[19].IPs[1].Block})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.CreateNode(t.Context(), store.Node{Name: "node-c"}); err != nil {
		t.Fatal(err)
	}
	nc, err := f.st.GetNode(t.Context(), "node-c")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.st.DeleteNode(t.Context(), nc); err != nil {
		t.Fatal(err)
	}
	p, err := f.st.GetPool(t.Context(), "v6")
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.Disabled = true
	if p, err = f.st.UpdatePool(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	last, _ := kvbacked.VersionRevision(p.Version)
	atRevision(t, v, last)
	same(t, v, f.st)
	if _, ok := v.Node("node-c"); ok {
		t.Error("a deleted node object is in the view")
	}
	if n, ok := v.Node(c.Node); !ok || !holdsBlock(n, c.BlockRef) {
		t.Errorf("node %s in the view does not hold its block %s", c.Node, c.BlockRef)
	}
	if n := v.Lists(); n != 1 {
		t.Errorf("the view listed %d times, want once", n)
	}
}

// TestViewRelistsAfterCompaction: a view cut off while etcd compacted
// past its revision cannot resume its watch from there: it lists again,
// is not synced until it has, and then holds the store's state, changes
// made while it was cut off included.
func TestViewRelistsAfterCompaction(t *testing.T) {
	f := newFixture(t)
	f.allocate(t, "node-a", "first")
	src, _ := f.st.Follower()
	var logs testenv.SyncBuffer
	v := storeview.New(src, slog.New(slog.NewTextHandler(&logs, nil)))
	run(t, v)
	waitFor(t, v, "synced", v.Synced)
	at, _ := kvbacked.RevisionOf(v.Revision())

	// Cut off: the view is not synced, and cannot list.
	f.proxy.Refuse(true)
	f.proxy.Cut()
	waitFor(t, v, "not synced", func() bool { return !v.Synced() })
	if err := v.Refresh(t.Context()); !errors.Is(err, storeview.ErrNotSynced) {
		t.Fatalf("Refresh of a view whose watch failed: %v, want ErrNotSynced", err)
	}

	// Meanwhile, changes and a compaction past the view's revision.
	direct := directStore(t, f.srv)
	a := allocator.New(direct, nil)
	var last int64
	for i := range 5 {
		h, err := a.Allocate(t.Context(), allocator.Request{
			Handle: ipam.Handle{ID: fmt.Sprintf("net.later%d.eth0", i), Network: "net", ContainerID: fmt.Sprintf("later%d", i),
				IfName: "eth0", Node: "node-b", Namespace: "ns", Pod: fmt.Sprintf("later%d", i)},
			Sets: [][]string{{"v4"}, {"v6"}}})
		if err != nil {
			t.Fatal(err)
		}
		n, err := direct.GetNode(t.Context(), h.Node)
		if err != nil {
			t.Fatal(err)
		}
		last, _ = kvbacked.VersionRevision(n.Version)
	}
	compact(t, f.srv, last)
	if last <= at {
		t.Fatalf("compacted at %d, not past the view's revision %d", last, at)
	}
	if src2, ok := direct.Follower(); ok {
		err := src2.Watch(t.Context(), storeview.Revision(fmt.Sprint(at)), func(storeview.Batch) {})
		if !errors.Is(err, storeview.ErrExpired) {
			t.Fatalf("Watch from the compacted revision %d: %v, want ErrExpired", at, err)
		}
	}
	if v.Synced() {
		t.Fatal("the view reports synced while cut off")
	}

	f.proxy.Refuse(false)
	atRevision(t, v, last)
	same(t, v, f.st)
	if n := v.Lists(); n != 2 {
		t.Errorf("the view listed %d times, want once more after the compaction", n)
	}
	if !strings.Contains(logs.String(), "revision expired") {
		t.Errorf("the view did not find its revision expired; its log:\n%s", logs.String())
	}
}

// TestViewConnectionCut: a view whose connection is cut is not synced
// until its watch, resumed from the view's revision, has caught up (etcd
// reported its progress); it then holds the changes made while it was
// cut off, follows those after, and has not listed again.
func TestViewConnectionCut(t *testing.T) {
	f := newFixture(t)
	f.allocate(t, "node-a", "first")
	src, _ := f.st.Follower()
	v := storeview.New(src, nil)
	run(t, v)
	waitFor(t, v, "synced", v.Synced)
	lists := v.Lists()

	f.proxy.Refuse(true)
	f.proxy.Cut()
	waitFor(t, v, "not synced", func() bool { return !v.Synced() })
	if !errors.Is(v.Err(), store.ErrUnavailable) {
		t.Errorf("the view's error after the cut: %v, want store.ErrUnavailable", v.Err())
	}
	// While cut off, the same parts of node-a change several times: the
	// resumed watch replays them in one go, and only revision order
	// leaves the last state.
	direct := directStore(t, f.srv)
	da := allocator.New(direct, nil)
	var h ipam.Handle
	for i := range 4 {
		var err error
		h, err = da.Allocate(t.Context(), allocator.Request{
			Handle: ipam.Handle{ID: fmt.Sprintf("net.cut%d.eth0", i), Network: "net", ContainerID: fmt.Sprintf("cut%d", i), IfName: "eth0", Node: "node-a"},
			Sets:   [][]string{{"v4"}, {"v6"}}})
		if err != nil {
			t.Fatal(err)
		}
		if i < 3 {
			if _, err := da.Release(t.Context(), "node-a", h.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	f.proxy.Refuse(false)
	waitFor(t, v, "synced again", v.Synced)
	if n, ok := v.Node("node-a"); !ok || !holds(n, h.ID) || holds(n, "net.cut0.eth0") {
		t.Errorf("after the cut the view's node-a lacks %s or holds a released handle", h.ID)
	}
	same(t, v, f.st)
	after := f.allocate(t, "node-a", "after")
	n, err := f.st.GetNode(t.Context(), "node-a")
	if err != nil {
		t.Fatal(err)
	}
	rev, _ := kvbacked.VersionRevision(n.Version)
	atRevision(t, v, rev)
	same(t, v, f.st)
	if n, _ := v.Node("node-a"); !holds(n, after.ID) {
		t.Errorf("the view does not follow changes after the cut")
	}
	if v.Lists() != lists {
		t.Errorf("lists: %d before the cut, %d after, want none more (the watch resumes)", lists, v.Lists())
	}
}

func holdsBlock(n store.Node, ref store.BlockRef) bool {
	_, ok := n.Block(ref)
	return ok
}

func holds(n store.Node, id string) bool {
	_, ok := n.Handle(id)
	return ok
}

// directStore opens the fixture's store without the proxy.
func directStore(t *testing.T, srv *etcdtest.Server) *kvbacked.Store {
	t.Helper()
	kvs, err := etcd.Open(t.Context(), etcd.Config{Endpoints: []string{srv.Endpoint}, Prefix: "/views/"})
	if err != nil {
		t.Fatal(err)
	}
	st := kvbacked.New(kvs)
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func compact(t *testing.T, srv *etcdtest.Server, rev int64) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Compact(t.Context(), rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
}

// TestViewSync: Sync (and Refresh) of a followed view returns once the
// view holds every write made before the call, without listing again.
func TestViewSync(t *testing.T) {
	f := newFixture(t)
	src, _ := f.st.Follower()
	v := storeview.New(src, nil)
	run(t, v)
	waitFor(t, v, "synced", v.Synced)
	for i := range 5 {
		h := f.allocate(t, "node-a", fmt.Sprintf("sync%d", i))
		if err := v.Refresh(t.Context()); err != nil {
			t.Fatal(err)
		}
		if n, ok := v.Node("node-a"); !ok || !holds(n, h.ID) {
			t.Fatalf("after Sync the view lacks %s, written before it", h.ID)
		}
	}
	same(t, v, f.st)
	if v.Lists() != 1 {
		t.Errorf("the view listed %d times, want once", v.Lists())
	}
}

// TestViewUnreadableObjects: node objects, pools and claims that cannot
// be decoded are reported as such (Bad), in the first list and from the
// watch, and leave the view when they are written whole again or
// deleted; the others are shown.
func TestViewUnreadableObjects(t *testing.T) {
	f := newFixture(t)
	f.allocate(t, "node-a", "ok")
	kvs, err := etcd.Open(t.Context(), etcd.Config{Endpoints: []string{f.srv.Endpoint}, Prefix: "/views/"})
	if err != nil {
		t.Fatal(err)
	}
	defer kvs.Close()
	put := func(key, val string) int64 {
		t.Helper()
		rev, err := kv.TxnRevision(t.Context(), kvs, nil, []kv.Op{{Key: key, Value: []byte(val)}})
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	put("nodes/node-x/head", "{not json")
	src, _ := f.st.Follower()
	v := storeview.New(src, nil)
	run(t, v)
	waitFor(t, v, "synced", v.Synced)
	bad := func() []string {
		var out []string
		for _, e := range v.Snapshot().Bad {
			if !errors.Is(e.Err, store.ErrCorrupt) {
				t.Errorf("%s: %v, want ErrCorrupt", e.What(), e.Err)
			}
			out = append(out, e.What())
		}
		return out
	}
	if got := bad(); len(got) != 1 || got[0] != "node node-x" {
		t.Fatalf("unreadable after the list: %v, want node node-x", got)
	}
	if _, ok := v.Node("node-a"); !ok {
		t.Fatal("a readable node object is missing beside an unreadable one")
	}
	atRevision(t, v, put("pools2/v4", "{garbage"))
	if got := bad(); len(got) != 2 || got[0] != "node node-x" || got[1] != "pool v4" {
		t.Fatalf("unreadable after the watch: %v, want node node-x and pool v4", got)
	}
	if len(v.Snapshot().Pools) != 1 {
		t.Errorf("pools in the view: %v, want v6 alone", v.Snapshot().Pools)
	}
	if err := kvs.Txn(t.Context(), nil, []kv.Op{{Key: "nodes/node-x/head", Delete: true}}); err != nil {
		t.Fatal(err)
	}
	n, err := f.st.CreateNode(t.Context(), store.Node{Name: "node-y"})
	if err != nil {
		t.Fatal(err)
	}
	rev, _ := kvbacked.VersionRevision(n.Version)
	atRevision(t, v, rev)
	if got := bad(); len(got) != 1 || got[0] != "pool v4" {
		t.Fatalf("unreadable after node-x was deleted: %v, want pool v4", got)
	}
}
