package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/storeview"
	"github.com/ipkeeper/ipkeeper/internal/testenv"
)

// watchRig is a partition of an API server, a store the test writes with
// (directly, or through a proxy never cut when the server restarts) and
// a store whose view reaches the API server through a proxy the test can
// cut.
type watchRig struct {
	s      *kubetest.Server
	proxy  *kubetest.Proxy
	direct *Store
	viewed *Store
	a      *allocator.Allocator
}

func newWatchRig(t *testing.T, s *kubetest.Server) *watchRig {
	t.Helper()
	prefix := "t" + strconv.FormatInt(partitions.Add(1), 10)
	r := &watchRig{s: s, proxy: kubetest.NewProxy(t, s)}
	var err error
	if r.viewed, err = NewForConfig(r.proxy.RESTConfig(s.AdminToken()), prefix); err != nil {
		t.Fatal(err)
	}
	// The writer goes through a proxy of its own, which follows a
	// restarted server to its new port.
	if r.direct, err = NewForConfig(kubetest.NewProxy(t, s).RESTConfig(s.AdminToken()), prefix); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.viewed.Close(); r.direct.Close() })
	r.a = allocator.New(r.direct, nil)
	return r
}

// The pools the watch tests allocate from.
var (
	watchPool4 = ipam.Pool{Name: "w4", CIDR: netip.MustParsePrefix("10.30.0.0/16"), BlockSize: 26}
	watchPool6 = ipam.Pool{Name: "w6", CIDR: netip.MustParsePrefix("fd00:30::/64"), BlockSize: 122}
)

// allocate gives a dual-stack handle to a pod on node.
func (r *watchRig) allocate(t *testing.T, node, pod string) ipam.Handle {
	t.Helper()
	h, err := r.a.Allocate(t.Context(), allocator.Request{
		Handle: ipam.Handle{ID: "net." + pod + ".eth0", Network: "net", ContainerID: pod, IfName: "eth0", Node: node,
			Namespace: "ns", Pod: pod},
		Sets: [][]string{{watchPool4.Name}, {watchPool6.Name}}, Define: []ipam.Pool{watchPool4, watchPool6}})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (r *watchRig) release(t *testing.T, h ipam.Handle) {
	t.Helper()
	if _, err := r.a.Release(t.Context(), h.Node, h.ID); err != nil {
		t.Fatal(err)
	}
}

// runView starts a view of the watcher until the test ends.
func runView(t *testing.T, v *storeview.View) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); v.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// waitView waits until cond holds of the view, checked at each change.
func waitView(t *testing.T, v *storeview.View, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
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
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// describe is what the store lists, or the view holds, as text.
func describe(t *testing.T, pools []store.Pool, claims []store.Claim, nodes []store.Node) string {
	t.Helper()
	var b strings.Builder
	for _, p := range pools {
		fmt.Fprintf(&b, "pool %s@%s %s disabled=%v\n", p.Spec.Name, p.Version, p.Spec.CIDR, p.Spec.Disabled)
	}
	for _, c := range claims {
		fmt.Fprintf(&b, "claim %s %s@%s\n", c.BlockRef, c.Node, c.Version)
	}
	for _, n := range nodes {
		enc, err := store.MarshalNode(n)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "node %s@%s %s\n", n.Name, n.Version, enc)
	}
	return b.String()
}

func describeStore(t *testing.T, st *Store) string {
	t.Helper()
	ctx := t.Context()
	pools, err := st.ListPools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range pools {
		pools[i].Spec.Reserved = nil // not followed by the view
	}
	claims, err := st.ListClaims(ctx, store.ClaimSelector{})
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := st.ListNodes(ctx, store.NodeSelector{})
	if err != nil {
		t.Fatal(err)
	}
	return describe(t, pools, claims, nodes)
}

func describeView(t *testing.T, v *storeview.View) string {
	snap := v.Snapshot()
	if len(snap.Bad) > 0 {
		return fmt.Sprintf("unreadable: %v", snap.Bad)
	}
	return describe(t, snap.Pools, snap.Claims, snap.Nodes)
}

// converge waits until the view is synced and holds what the store lists.
func converge(t *testing.T, v *storeview.View, st *Store) {
	t.Helper()
	var want string
	waitView(t, v, "the store's state", func() bool {
		want = describeStore(t, st)
		return v.Synced() && describeView(t, v) == want
	})
}

// TestWatcherFollows: the view of a Kubernetes partition lists once, then
// follows every change by its WATCHes — handles allocated and released
// (IPv4 and IPv6 blocks, each a claim and its state in one IPAMBlock),
// node objects created and deleted, a pool changed — and holds what the
// store lists, node objects assembled as GetNode assembles them.
func TestWatcherFollows(t *testing.T) {
	r := newWatchRig(t, kubetest.Require(t, srv))
	for i := range 3 {
		r.allocate(t, "node-a", fmt.Sprintf("pre%d", i))
	}
	v := storeview.New(r.viewed.Watcher(), nil)
	if v.Synced() {
		t.Fatal("a view that has not listed reports synced")
	}
	runView(t, v)
	converge(t, v, r.direct)

	var hs []ipam.Handle
	for i := range 12 {
		node := "node-a"
		if i%3 == 0 {
			node = "node-b"
		}
		hs = append(hs, r.allocate(t, node, fmt.Sprintf("pod%d", i)))
	}
	for _, h := range hs[:6] {
		r.release(t, h)
	}
	if _, err := r.direct.CreateNode(t.Context(), store.Node{Name: "node-c"}); err != nil {
		t.Fatal(err)
	}
	nc, err := r.direct.GetNode(t.Context(), "node-c")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.direct.DeleteNode(t.Context(), nc); err != nil {
		t.Fatal(err)
	}
	p, err := r.direct.GetPool(t.Context(), watchPool6.Name)
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.Disabled = true
	if _, err := r.direct.UpdatePool(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	converge(t, v, r.direct)
	if _, ok := v.Node("node-c"); ok {
		t.Error("a deleted node object is in the view")
	}
	if n := v.Lists(); n != 1 {
		t.Errorf("the view listed %d times, want once", n)
	}
}

// TestWatcherConnectionCut: a view whose connection to the API server is
// cut is not synced until its WATCHes, resumed from the resourceVersions
// it holds (events' and bookmarks'), are accepted again; it then holds the
// changes made while it was cut off (a node object deleted then is one
// the resumed watch-list no longer sends), follows those after, and has
// not listed again.
func TestWatcherConnectionCut(t *testing.T) {
	r := newWatchRig(t, kubetest.Require(t, srv))
	r.allocate(t, "node-a", "first")
	v := storeview.New(r.viewed.Watcher(), nil)
	runView(t, v)
	gone, err := r.direct.CreateNode(t.Context(), store.Node{Name: "node-gone"})
	if err != nil {
		t.Fatal(err)
	}
	converge(t, v, r.direct)
	watches := r.proxy.Watches()

	r.proxy.Refuse(true)
	r.proxy.Cut()
	waitView(t, v, "not synced", func() bool { return !v.Synced() })
	if err := r.direct.DeleteNode(t.Context(), gone); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(v.Err(), store.ErrUnavailable) {
		t.Errorf("the view's error after the cut: %v, want store.ErrUnavailable", v.Err())
	}
	var h ipam.Handle
	for i := range 4 {
		h = r.allocate(t, "node-a", fmt.Sprintf("cut%d", i))
		if i < 3 {
			r.release(t, h)
		}
	}
	if v.Synced() {
		t.Fatal("the view reports synced while cut off")
	}
	r.proxy.Refuse(false)
	converge(t, v, r.direct)
	if n, _ := v.Node("node-a"); !holds(n, h.ID) || holds(n, "net.cut0.eth0") {
		t.Errorf("after the cut the view's node-a lacks %s or holds a released handle", h.ID)
	}
	after := r.allocate(t, "node-a", "after")
	converge(t, v, r.direct)
	if n, _ := v.Node("node-a"); !holds(n, after.ID) {
		t.Error("the view does not follow changes after the cut")
	}
	if v.Lists() != 1 {
		t.Errorf("the view listed %d times, want once (the watch resumes)", v.Lists())
	}
	if r.proxy.Watches() <= watches {
		t.Errorf("no WATCH was sent again after the cut")
	}
	if _, ok := v.Node("node-gone"); ok {
		t.Error("the view holds node-gone, deleted while it was cut off")
	}
}

// TestWatcherExpired: a regular WATCH from a resourceVersion the API
// server's watch cache does not hold fails with storeview.ErrExpired (a
// real 410 Gone), and a view whose resumed WATCH is answered so lists again, is
// not synced until it has, and then holds the store's state.
func TestWatcherExpired(t *testing.T) {
	r := newWatchRig(t, kubetest.Require(t, srv))
	r.allocate(t, "node-a", "first")
	w := r.direct.Watcher()
	st, err := w.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Nodes) != 1 || len(st.Claims) != 2 || len(st.Pools) != 2 {
		t.Fatalf("list: %d nodes, %d claims, %d pools; want 1, 2, 2", len(st.Nodes), len(st.Claims), len(st.Pools))
	}
	w.plainWatch.Store(true) // a regular WATCH; a watch-list is never too old
	err = w.Watch(t.Context(), "p=2,b=2,n=2", func(storeview.Batch) {})
	if !errors.Is(err, storeview.ErrExpired) {
		t.Fatalf("Watch from resourceVersion 2: %v, want ErrExpired", err)
	}

	var logs testenv.SyncBuffer
	v := storeview.New(r.viewed.Watcher(), slog.New(slog.NewTextHandler(&logs, nil)))
	runView(t, v)
	converge(t, v, r.direct)
	r.proxy.Refuse(true)
	r.proxy.ExpireWatches(1)
	r.proxy.Cut()
	waitView(t, v, "not synced", func() bool { return !v.Synced() })
	h := r.allocate(t, "node-b", "meanwhile")
	r.proxy.Refuse(false)
	converge(t, v, r.direct)
	if n, _ := v.Node("node-b"); !holds(n, h.ID) {
		t.Errorf("the view lacks %s, allocated while it was cut off", h.ID)
	}
	if n := v.Lists(); n != 2 {
		t.Errorf("the view listed %d times, want once more after the 410", n)
	}
	if !strings.Contains(logs.String(), "revision expired") {
		t.Errorf("the view did not find its revision expired; its log:\n%s", logs.String())
	}
}

// TestWatcherAPIServerRestart: the API server restarts on the same etcd
// while the view follows it. The view is not synced while the server is
// down; the restarted server's watch cache starts after the view's
// resourceVersions, so the resumed WATCH is answered 410 and the view
// lists again; it then holds the changes made while the server was down
// or restarting, and follows those after.
func TestWatcherAPIServerRestart(t *testing.T) {
	s := kubetest.Start(t)
	r := newWatchRig(t, s)
	r.allocate(t, "node-a", "first")
	var logs testenv.SyncBuffer
	v := storeview.New(r.viewed.Watcher(), slog.New(slog.NewTextHandler(&logs, nil)))
	runView(t, v)
	converge(t, v, r.direct)
	h := r.allocate(t, "node-a", "before")
	converge(t, v, r.direct)

	r.release(t, h)
	if err := s.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitView(t, v, "not synced or relisted", func() bool { return !v.Synced() || v.Lists() > 1 })
	later := r.allocate(t, "node-b", "later")
	converge(t, v, r.direct)
	n, _ := v.Node("node-a")
	if holds(n, h.ID) {
		t.Errorf("the view holds %s, released while the server restarted", h.ID)
	}
	if n, _ := v.Node("node-b"); !holds(n, later.ID) {
		t.Errorf("the view lacks %s, allocated after the restart", later.ID)
	}
	t.Logf("lists: %d; log:\n%s", v.Lists(), logs.String())
}

func holds(n store.Node, id string) bool {
	_, ok := n.Handle(id)
	return ok
}

// refuseWatchList answers every watch-list 422, as an API server without
// the WatchList feature does, and passes the rest on.
type refuseWatchList struct {
	next    http.RoundTripper
	refused atomic.Int64
}

func (rt *refuseWatchList) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Query().Get("sendInitialEvents") != "true" {
		return rt.next.RoundTrip(req)
	}
	rt.refused.Add(1)
	body := `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Invalid","code":422,` +
		`"message":"sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"}`
	return &http.Response{StatusCode: http.StatusUnprocessableEntity, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
}

// TestWatcherWithoutWatchList: against an API server that refuses
// watch-lists (422), the view follows the store by regular WATCHes.
func TestWatcherWithoutWatchList(t *testing.T) {
	s := kubetest.Require(t, srv)
	r := newWatchRig(t, s)
	rt := &refuseWatchList{}
	cfg := rest.CopyConfig(s.Config)
	cfg.WrapTransport = func(next http.RoundTripper) http.RoundTripper { rt.next = next; return rt }
	viewed, err := NewForConfig(cfg, r.direct.prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { viewed.Close() })
	r.allocate(t, "node-a", "first")
	w := viewed.Watcher()
	v := storeview.New(w, nil)
	runView(t, v)
	converge(t, v, r.direct)
	h := r.allocate(t, "node-b", "second")
	converge(t, v, r.direct)
	if n, _ := v.Node("node-b"); !holds(n, h.ID) {
		t.Errorf("the view lacks %s", h.ID)
	}
	if rt.refused.Load() == 0 || !w.plainWatch.Load() {
		t.Errorf("%d watch-lists refused, plain watches %v; want some refused and plain watches", rt.refused.Load(), w.plainWatch.Load())
	}
}
