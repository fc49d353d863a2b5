package controller

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kube"
)

// kubeViewRig is a rig on the Kubernetes datastore whose controller's
// view of the store reaches the API server through a proxy the test can
// cut (its reads and writes go directly: a guard that let a view cut off
// decide would release).
type kubeViewRig struct {
	*rig
	proxy *kubetest.Proxy
	c     *Controller
}

// viewedStore is a kube.Store whose Watcher reaches the API server
// through the rig's proxy.
type viewedStore struct {
	*kube.Store
	follow *kube.Store
}

func (s viewedStore) Watcher() *kube.Watcher { return s.follow.Watcher() }

func newKubeViewRig(t *testing.T, grace time.Duration, f family) *kubeViewRig {
	t.Helper()
	r := newRigOn(t, grace, config.DatastoreKubernetes)
	ctx := context.Background()
	r.alloc(func(a *allocator.Allocator) {
		if _, err := a.EnsurePool(ctx, f.pool); err != nil {
			t.Fatal(err)
		}
	})
	s := kubetest.Require(t, srv)
	vr := &kubeViewRig{rig: r, proxy: kubetest.NewProxy(t, s)}
	token := s.ServiceAccountToken(t, "kube-system", "ipkeeper-controller")
	cfg := r.c.cfg
	cfg.Open = func(ctx context.Context) (store.Store, error) {
		direct, err := datastore.Open(ctx, r.ds, datastore.Options{})
		if err != nil {
			return nil, err
		}
		proxied, err := kube.NewForConfig(vr.proxy.RESTConfig(token), r.ds.Prefix)
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { _ = proxied.Close() })
		return viewedStore{Store: direct.(*kube.Store), follow: proxied}, nil
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

func (r *kubeViewRig) pass(at time.Time) error {
	r.clock.Set(at)
	_, err := r.c.Pass(context.Background())
	return err
}

// waitView waits until the controller's followed view is synced or not.
func (r *kubeViewRig) waitView(synced bool) {
	r.t.Helper()
	r.waitCache(func() bool {
		r.c.viewMu.Lock()
		v := r.c.sview
		r.c.viewMu.Unlock()
		return v != nil && v.Synced() == synced
	}, "the store view synced="+map[bool]string{true: "true", false: "false"}[synced])
}

// waitHolds waits until the controller's view holds the handle of
// container.
func (r *kubeViewRig) waitHolds(node, container string) {
	r.t.Helper()
	r.waitCache(func() bool {
		r.c.viewMu.Lock()
		v := r.c.sview
		r.c.viewMu.Unlock()
		if v == nil {
			return false
		}
		n, ok := v.Node(node)
		if !ok {
			return false
		}
		for _, h := range n.Handles {
			if h.ContainerID == container {
				return true
			}
		}
		return false
	}, "the store view holding "+container)
}

// TestPassKubeViewNotSynced: on the Kubernetes datastore, while the
// controller's view has never listed (the API server unreachable by its
// LIST), every pass fails with ErrStoreNotSynced and nothing is released,
// however much time passes; once the view lists, the leak is released
// after the grace period. IPv4 and IPv6.
func TestPassKubeViewNotSynced(t *testing.T) {
	for _, f := range passFamilies {
		t.Run(f.name, func(t *testing.T) {
			const grace = time.Minute
			r := newKubeViewRig(t, grace, f)
			node := r.node("a")
			r.attach(f.pool, "gone", "gone", "gone-uid", node, t0)
			r.proxy.Refuse(true) // the view's list cannot reach the API server
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
			if _, ok := r.handles()["gone"]; ok {
				t.Error("the leak was not released once the view listed")
			}
		})
	}
}

// TestPassKubeViewWatchFailed: on the Kubernetes datastore a leak seen by
// a pass is not released while the view's WATCH has failed and not been
// accepted again: neither by a pass that starts then (ErrStoreNotSynced)
// nor by one whose view failed after it read it (the release is dropped);
// once the WATCH resumed, without a new LIST, the next pass releases it.
// IPv4 and IPv6.
func TestPassKubeViewWatchFailed(t *testing.T) {
	for _, f := range passFamilies {
		t.Run(f.name, func(t *testing.T) {
			const grace = time.Minute
			r := newKubeViewRig(t, grace, f)
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

			r.proxy.Refuse(true)
			r.proxy.Cut()
			r.waitView(false)
			if err := r.pass(t0.Add(2 * grace)); !errors.Is(err, ErrStoreNotSynced) {
				t.Fatalf("pass with a failed watch: %v, want ErrStoreNotSynced", err)
			}
			if after := r.storeState(); !maps.Equal(before, after) {
				t.Fatalf("a pass on a failed watch changed the store:\n%v\n->\n%v", before, after)
			}

			r.proxy.Refuse(false)
			r.waitView(true)
			r.c.afterObserve = func() {
				r.proxy.Refuse(true)
				r.proxy.Cut()
				r.waitView(false)
			}
			if err := r.pass(t0.Add(3 * grace)); err != nil {
				t.Fatalf("pass whose view failed after it read it: %v", err)
			}
			r.c.afterObserve = nil
			if after := r.storeState(); !maps.Equal(before, after) {
				t.Fatalf("a pass whose view failed after it read it changed the store:\n%v\n->\n%v", before, after)
			}

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
}
