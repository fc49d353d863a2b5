package controller

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
	"github.com/ipkeeper/ipkeeper/internal/store/kube"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
	"github.com/ipkeeper/ipkeeper/internal/storeview"
	"github.com/ipkeeper/ipkeeper/internal/webui"
)

// cuttable is a proxy between the controller's view and its datastore
// that the test can refuse and cut (etcdtest.Proxy, kubetest.Proxy).
type cuttable interface {
	Refuse(on bool)
	Cut()
}

// viewRig is a rig whose controller's view of the store reaches the
// datastore (etcd, or the API server) through a proxy the test can cut
// (its reads and writes go directly: a guard that let a view cut off
// decide would release). On etcd it also counts the reads the controller
// makes of the store (apart from its view's list and watch).
type viewRig struct {
	*rig
	proxy cuttable
	c     *Controller
	reads *countingStore
}

// viewBackends are the datastores whose views follow a watch.
var viewBackends = []string{config.DatastoreEtcd, config.DatastoreKubernetes}

func newViewRig(t *testing.T, grace time.Duration, f family, ds string) *viewRig {
	t.Helper()
	r := newRigOn(t, grace, ds)
	ctx := context.Background()
	r.alloc(func(a *allocator.Allocator) {
		if _, err := a.EnsurePool(ctx, f.pool); err != nil {
			t.Fatal(err)
		}
	})
	vr := &viewRig{rig: r}
	cfg := r.c.cfg
	if ds == config.DatastoreKubernetes {
		cfg.Open = vr.kubeOpen(t)
	} else {
		cfg.Open = vr.etcdOpen(t)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.viewSyncWait = 2 * time.Second
	t.Cleanup(c.Shutdown)
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !c.Sync(sctx) {
		t.Fatal("informers did not sync")
	}
	vr.c = c
	return vr
}

// etcdOpen opens the rig's etcd store directly, its view through a proxy.
func (r *viewRig) etcdOpen(t *testing.T) func(context.Context) (store.Store, error) {
	proxy := etcdtest.NewProxy(t, strings.TrimPrefix(r.ds.Endpoints[0], "http://"))
	r.proxy = proxy
	ds := r.ds
	ds.Endpoints = []string{"http://" + proxy.Addr()}
	return func(ctx context.Context) (store.Store, error) {
		direct, err := datastore.Open(ctx, r.ds, datastore.Options{})
		if err != nil {
			return nil, err
		}
		proxied, err := datastore.Open(ctx, ds, datastore.Options{})
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { _ = proxied.Close() })
		r.reads = &countingStore{Store: direct.(*kvbacked.Store), follow: proxied.(*kvbacked.Store), n: map[string]int{}}
		return r.reads, nil
	}
}

// kubeOpen opens the rig's Kubernetes store directly, its view (the
// Watcher) through a proxy, as the controller's ServiceAccount.
func (r *viewRig) kubeOpen(t *testing.T) func(context.Context) (store.Store, error) {
	s := kubetest.Require(t, srv)
	proxy := kubetest.NewProxy(t, s)
	r.proxy = proxy
	token := s.ServiceAccountToken(t, "kube-system", "ipkeeper-controller")
	return func(ctx context.Context) (store.Store, error) {
		direct, err := datastore.Open(ctx, r.ds, datastore.Options{})
		if err != nil {
			return nil, err
		}
		proxied, err := kube.NewForConfig(proxy.RESTConfig(token), r.ds.Prefix)
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { _ = proxied.Close() })
		return viewedStore{Store: direct.(*kube.Store), follow: proxied}, nil
	}
}

// viewedStore is a kube.Store whose Watcher reaches the API server
// through the rig's proxy.
type viewedStore struct {
	*kube.Store
	follow *kube.Store
}

func (s viewedStore) Watcher() *kube.Watcher { return s.follow.Watcher() }

// pass runs one pass of the rig's controller at time at.
func (r *viewRig) pass(at time.Time) error {
	r.clock.Set(at)
	_, err := r.c.Pass(context.Background())
	return err
}

// view is the controller's store view (nil before its first pass).
func (r *viewRig) view() *storeview.View {
	r.c.viewMu.Lock()
	defer r.c.viewMu.Unlock()
	return r.c.sview
}

// waitView waits until the controller's followed view is synced or not.
func (r *viewRig) waitView(synced bool) {
	r.t.Helper()
	r.waitCache(func() bool {
		v := r.view()
		return v != nil && v.Synced() == synced
	}, "the store view synced="+map[bool]string{true: "true", false: "false"}[synced])
}

// waitHolds waits until the controller's view holds the handle of
// container (on the Kubernetes datastore a pass decides from the view as
// its watch delivered it).
func (r *viewRig) waitHolds(node, container string) {
	r.t.Helper()
	r.waitCache(func() bool {
		v := r.view()
		if v == nil {
			return false
		}
		n, ok := v.Node(node)
		return ok && slices.ContainsFunc(n.Handles, func(h ipam.Handle) bool { return h.ContainerID == container })
	}, "the store view holding "+container)
}

// passesOnFailedView cuts the view off its datastore and runs a pass at
// first (it fails with ErrStoreNotSynced), lets the view resume and runs
// one at second whose view fails right after the pass read it; neither
// may change the store from before. The view is synced again on return.
func (r *viewRig) passesOnFailedView(first, second time.Time, before map[string]store.Version) {
	r.t.Helper()
	r.proxy.Refuse(true)
	r.proxy.Cut()
	r.waitView(false)
	if err := r.pass(first); !errors.Is(err, ErrStoreNotSynced) {
		r.t.Fatalf("pass with a failed watch: %v, want ErrStoreNotSynced", err)
	}
	if after := r.storeState(); !maps.Equal(before, after) {
		r.t.Fatalf("a pass on a failed watch changed the store:\n%v\n->\n%v", before, after)
	}
	r.proxy.Refuse(false)
	r.waitView(true)
	r.c.afterObserve = func() {
		r.proxy.Refuse(true)
		r.proxy.Cut()
		r.waitView(false)
	}
	if err := r.pass(second); err != nil {
		r.t.Fatalf("pass whose view failed after it read it: %v", err)
	}
	r.c.afterObserve = nil
	if after := r.storeState(); !maps.Equal(before, after) {
		r.t.Fatalf("a pass whose view failed after it read it changed the store:\n%v\n->\n%v", before, after)
	}
	r.proxy.Refuse(false)
	r.waitView(true)
}

// forViews runs test for each watched datastore and address family.
func forViews(t *testing.T, test func(t *testing.T, ds string, f family)) {
	for _, ds := range viewBackends {
		for _, f := range passFamilies {
			t.Run(ds+"/"+f.name, func(t *testing.T) { test(t, ds, f) })
		}
	}
}

// TestPassStoreViewNotSynced: while the controller's view of the store
// has never listed it (etcd or the API server unreachable after the
// open), every pass fails with ErrStoreNotSynced and nothing is
// released, however much time passes; once the view lists, the leak is
// released after the grace period. etcd and Kubernetes, IPv4 and IPv6.
func TestPassStoreViewNotSynced(t *testing.T) {
	forViews(t, func(t *testing.T, ds string, f family) {
		const grace = time.Minute
		r := newViewRig(t, grace, f, ds)
		node := r.node("a")
		r.attach(f.pool, "gone", "gone", "gone-uid", node, t0)
		r.attach(f.pool, "live", "live", r.pod("live", node, corev1.PodRunning), node, t0)
		open := r.c.cfg.Open
		r.c.cfg.Open = func(ctx context.Context) (store.Store, error) {
			st, err := open(ctx)
			r.proxy.Refuse(true) // the view's list cannot reach the datastore
			r.proxy.Cut()
			return st, err
		}
		before := r.storeState()
		for i := range 3 {
			if err := r.pass(t0.Add(time.Duration(i) * 2 * grace)); !errors.Is(err, ErrStoreNotSynced) {
				t.Fatalf("pass %d with a view that never listed: %v, want ErrStoreNotSynced", i, err)
			}
		}
		if after := r.storeState(); !maps.Equal(before, after) {
			t.Fatalf("passes on a view that never listed changed the store:\n%v\n->\n%v", before, after)
		}
		r.proxy.Refuse(false)
		r.waitView(true)
		for i := range 2 {
			if err := r.pass(t0.Add(time.Duration(6+i) * grace)); err != nil {
				t.Fatal(err)
			}
		}
		hs := r.handles()
		if _, ok := hs["gone"]; ok {
			t.Error("the leak was not released once the view listed")
		}
		if _, ok := hs["live"]; !ok {
			t.Error("the live pod's allocation was released")
		}
	})
}

// TestPassStoreViewWatchFailed: a leak seen by a pass is not released
// while the view's watch has failed and not caught up again: neither by
// a pass that starts then (ErrStoreNotSynced) nor by one whose view
// failed after it read it (the release is dropped); once the watch
// resumed, without a new list, the next pass releases it. etcd and
// Kubernetes, IPv4 and IPv6.
func TestPassStoreViewWatchFailed(t *testing.T) {
	forViews(t, func(t *testing.T, ds string, f family) {
		const grace = time.Minute
		r := newViewRig(t, grace, f, ds)
		node := r.node("a")
		if err := r.pass(t0); err != nil {
			t.Fatal(err)
		}
		r.attach(f.pool, "gone", "gone", "gone-uid", node, t0)
		r.waitHolds(node, "gone")
		if err := r.pass(t0); err != nil {
			t.Fatal(err)
		}
		before := r.storeState()

		r.passesOnFailedView(t0.Add(2*grace), t0.Add(3*grace), before)
		r.proxy.Refuse(false)
		r.waitView(true)
		if err := r.pass(t0.Add(4 * grace)); err != nil {
			t.Fatal(err)
		}
		if _, ok := r.handles()["gone"]; ok {
			t.Error("the leak was not released once the watch resumed")
		}
		if got := r.c.sview.Lists(); got != 1 {
			t.Errorf("the view listed %d times, want once (the watch resumes)", got)
		}
	})
}

// TestPassLeakFromWatch: an allocation whose pod never existed, written
// after the view listed, reaches the controller by the watch — the view's
// change asks for a pass — and the first pass a grace period after the
// one that saw it releases it; no pass lists the store (the view listed
// once), and what the release reads is the node object it changes.
// IPv4 and IPv6.
func TestPassLeakFromWatch(t *testing.T) {
	for _, f := range passFamilies {
		t.Run(f.name, func(t *testing.T) {
			const grace = time.Minute
			r := newViewRig(t, grace, f, config.DatastoreEtcd)
			node := r.node("a")
			live := r.attach(f.pool, "live", "live", r.pod("live", node, corev1.PodRunning), node, t0)
			if err := r.pass(t0); err != nil {
				t.Fatal(err)
			}
			select {
			case <-r.c.trigger:
			default:
			}
			r.reads.reset()

			leak := r.attach(f.pool, "gone", "gone", "gone-uid", node, t0)
			r.waitCache(func() bool { return len(r.c.trigger) > 0 }, "a pass asked for by the view's change")
			if err := r.pass(t0.Add(time.Second)); err != nil {
				t.Fatal(err)
			}
			if _, ok := r.handles()["gone"]; !ok {
				t.Fatal("released at first sight")
			}
			if err := r.pass(t0.Add(time.Second + grace)); err != nil {
				t.Fatal(err)
			}
			hs := r.handles()
			if _, ok := hs["gone"]; ok {
				t.Fatalf("leak %v not released by the first pass after the grace period", leak.IPs)
			}
			if hs["live"].IPs[0] != live.IPs[0] {
				t.Fatal("the live allocation changed")
			}
			n := r.reads.counts()
			if n["ListNodes"]+n["ListClaims"]+n["ListPools"] != 0 {
				t.Errorf("passes listed the store: %v", n)
			}
			if n["GetNode"] == 0 {
				t.Errorf("the release did not read the node object it changed: %v", n)
			}
			if l := r.c.sview.Lists(); l != 1 {
				t.Errorf("the view listed %d times, want once", l)
			}
			t.Logf("store reads of two passes and a release: %v", n)
		})
	}
}

// countingStore counts the reads made through it; the view's list and
// watch go to follow's kv store.
type countingStore struct {
	*kvbacked.Store
	follow *kvbacked.Store
	mu     sync.Mutex
	n      map[string]int
}

func (c *countingStore) Follower() (*kvbacked.Follower, bool) { return c.follow.Follower() }

func (c *countingStore) count(what string) {
	c.mu.Lock()
	c.n[what]++
	c.mu.Unlock()
}

func (c *countingStore) reset() {
	c.mu.Lock()
	clear(c.n)
	c.mu.Unlock()
}

func (c *countingStore) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

func (c *countingStore) GetNode(ctx context.Context, name string) (store.Node, error) {
	c.count("GetNode")
	return c.Store.GetNode(ctx, name)
}

func (c *countingStore) ListNodes(ctx context.Context, sel store.NodeSelector) ([]store.Node, error) {
	c.count("ListNodes")
	return c.Store.ListNodes(ctx, sel)
}

func (c *countingStore) ListClaims(ctx context.Context, sel store.ClaimSelector) ([]store.Claim, error) {
	if sel == (store.ClaimSelector{}) {
		c.count("ListClaims")
	} else {
		c.count("ListClaimsOf")
	}
	return c.Store.ListClaims(ctx, sel)
}

func (c *countingStore) ListPools(ctx context.Context) ([]store.Pool, error) {
	c.count("ListPools")
	return c.Store.ListPools(ctx)
}

func (c *countingStore) GetClaim(ctx context.Context, ref store.BlockRef) (store.Claim, error) {
	c.count("GetClaim")
	return c.Store.GetClaim(ctx, ref)
}

func (c *countingStore) GetPool(ctx context.Context, name string) (store.Pool, error) {
	c.count("GetPool")
	return c.Store.GetPool(ctx, name)
}

// TestMapSharesStoreView: on etcd the address map served by the
// controller shows the controller's own view of the store: the passes
// and the map follow one watch, and the view lists the store once.
func TestMapSharesStoreView(t *testing.T) {
	f := passFamilies[1]
	r := newViewRig(t, time.Minute, f, config.DatastoreEtcd)
	node := r.node("a")
	h := r.attach(f.pool, "gone", "gone", "gone-uid", node, t0)
	ctx := context.Background()
	sv, err := r.c.StoreView(ctx)
	if err != nil || sv == nil {
		t.Fatalf("StoreView on etcd: %v, %v", sv, err)
	}
	u, err := webui.New(webui.Options{View: sv, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = u.Run(mctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if err := r.pass(t0); err != nil {
		t.Fatal(err)
	}
	r.waitCache(func() bool {
		hs, _, loaded := u.Handles()
		return loaded && len(hs) == 1 && hs[0].ID == h.ID
	}, "the map showing the allocation")
	if r.c.sview != sv || sv.Lists() != 1 {
		t.Errorf("the pass and the map follow different views, or the view listed %d times", sv.Lists())
	}
}

// TestPassStoreViewUnreadable: while the view holds a node object that
// cannot be decoded, a pass fails (store.ErrCorrupt) and releases
// nothing: a reconciler does not decide on a partial view.
func TestPassStoreViewUnreadable(t *testing.T) {
	f := passFamilies[0]
	const grace = time.Minute
	r := newViewRig(t, grace, f, config.DatastoreEtcd)
	node := r.node("a")
	r.attach(f.pool, "gone", "gone", "gone-uid", node, t0)
	kvs, err := etcd.Open(context.Background(), etcd.Config{Endpoints: r.ds.Endpoints, Prefix: r.ds.Prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer kvs.Close()
	if err := kvs.Txn(context.Background(), nil, []kv.Op{{Key: "nodes/" + r.ns + "-x/head", Value: []byte("{not json")}}); err != nil {
		t.Fatal(err)
	}
	before := r.storeStateRaw(kvs)
	for i := range 2 {
		if err := r.pass(t0.Add(time.Duration(i) * 2 * grace)); !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("pass %d with an unreadable node object in the view: %v, want store.ErrCorrupt", i, err)
		}
	}
	if after := r.storeStateRaw(kvs); !maps.Equal(before, after) {
		t.Fatal("a pass on a view with an unreadable object changed the store")
	}
}

// storeStateRaw is every key of the store with its version.
func (r *viewRig) storeStateRaw(kvs kv.Store) map[string]int64 {
	r.t.Helper()
	es, err := kvs.List(context.Background(), "")
	if err != nil {
		r.t.Fatal(err)
	}
	out := map[string]int64{}
	for _, e := range es {
		out[e.Key] = e.Version
	}
	return out
}
