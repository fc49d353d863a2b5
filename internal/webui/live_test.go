package webui

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
)

// blockInUse is the in-use count the map shows for a block (-1: not
// shown). m.mu must be held.
func (m *model) blockInUse(pool, cidr string) int {
	b := m.blocks[store.BlockRef{Pool: pool, CIDR: netip.MustParsePrefix(cidr)}]
	if b == nil {
		return -1
	}
	return b.agg.inUse
}

// liveSteps allocates and releases through alloc (opened per step by
// with) and waits for the map to show each step.
func liveSteps(t *testing.T, u *UI, with func(func(a *allocator.Allocator))) {
	t.Helper()
	ctx := context.Background()
	var h ipam.Handle
	with(func(a *allocator.Allocator) {
		var err error
		h, err = a.Allocate(ctx, allocator.Request{Handle: ipam.Handle{ID: "net.ctr-live.eth0", Network: "net",
			ContainerID: "ctr-live", IfName: "eth0", Node: "node-c", Namespace: "default", Pod: "live"}, Sets: [][]string{{"a-v4"}}})
		if err != nil {
			t.Fatal(err)
		}
	})
	blk := h.IPs[0].Block.String()
	if blk != "10.20.0.64/26" {
		t.Fatalf("node-c claimed %s, want the first unclaimed block 10.20.0.64/26", blk)
	}
	waitFor(t, u, "the ADD", func() bool {
		b := u.m.blocks[store.BlockRef{Pool: "a-v4", CIDR: h.IPs[0].Block}]
		return b != nil && b.b.Node == "node-c" && b.agg.inUse == 1 && u.m.podCount["node-c"] == 1
	})
	// A borrow changes another node's block: node-c has no block of
	// b-tiny and none is left to claim, so it borrows from node-a's.
	with(func(a *allocator.Allocator) {
		if _, err := a.Allocate(ctx, allocator.Request{Handle: ipam.Handle{ID: "net.ctr-live2.eth0", Node: "node-c",
			Network: "net", ContainerID: "ctr-live2", IfName: "eth0"}, Sets: [][]string{{"b-tiny"}}}); err != nil {
			t.Fatal(err)
		}
	})
	waitFor(t, u, "the borrow", func() bool {
		b := u.m.blocks[store.BlockRef{Pool: "b-tiny", CIDR: netip.MustParsePrefix("10.30.0.0/28")}]
		return b.agg.borrowed == 2 && b.agg.borrowers["node-c"] == 1
	})
	with(func(a *allocator.Allocator) {
		if _, err := a.Release(ctx, "node-c", h.ID); err != nil {
			t.Fatal(err)
		}
	})
	waitFor(t, u, "the DEL", func() bool {
		return u.m.blockInUse("a-v4", blk) == 0 && u.m.handles[h.ID] == nil && u.m.podCount["node-c"] == 1
	})
}

// TestLocalStoreLive: changes other processes commit to the local file
// show up without any request, and the map holds the file only while it
// reads (the writer never waits long for it).
func TestLocalStoreLive(t *testing.T) {
	dir := t.TempDir()
	writeFixture(t, dir)
	s := startUI(t, localOpts(dir))
	liveSteps(t, s.u, func(f func(a *allocator.Allocator)) {
		// The local store's lock wait ends with ctx.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := datastore.Open(ctx, config.Datastore{Type: config.DatastoreLocal, Path: dir}, datastore.Options{})
		if err != nil {
			t.Fatalf("the map kept the local store locked: %v", err)
		}
		defer st.Close()
		f(allocator.New(st, nil))
	})
}

// TestLocalStoreMissing: a store that was never written is shown empty,
// and looking does not create it.
func TestLocalStoreMissing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "never")
	s := startUI(t, localOpts(dir))
	s.getJSON(t, "/api/pools", 200, &overview{})
	ov := s.getAny(t, "/api/pools", 200).(map[string]any)
	if pools := ov["pools"].([]any); len(pools) != 0 || ov["loaded"] != true || ov["error"] != nil {
		t.Errorf("empty store shown as %v", ov)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the map created %s: %v", dir, err)
	}
}

// TestEtcdLive: with etcd the map reads once and follows the watch.
func TestEtcdLive(t *testing.T) {
	srv := etcdtest.ForTest(t, nil)
	ctx := context.Background()
	ds := config.Datastore{Type: config.DatastoreEtcd, Endpoints: []string{srv.Endpoint}, Prefix: "/webui-live"}
	st, err := datastore.Open(ctx, ds, datastore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fillFixture(t, st)
	s := startUI(t, Options{Datastore: ds})
	if _, ok := s.u.currentFeed().(*viewFeed); !ok {
		t.Fatalf("the map follows etcd by %T, want its watch", s.u.currentFeed())
	}
	var ov overview
	s.getJSON(t, "/api/pools", 200, &ov)
	if len(ov.Pools) != 3 || ov.Pools[1].Borrowed != 1 || ov.Pools[0].InUse != 3 {
		t.Fatalf("etcd store shown as %+v", ov.Pools)
	}
	rev, err := st.(*kvbacked.Store).Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ov.Revision != rev {
		t.Errorf("shown at revision %d, the store is at %d", ov.Revision, rev)
	}
	storeLive(t, s.u, st)
}

// storeLive runs liveSteps through st, then changes a pool's definition
// (an exclude): every block of the pool is recomputed.
func storeLive(t *testing.T, u *UI, st store.Store) {
	t.Helper()
	ctx := context.Background()
	liveSteps(t, u, func(f func(a *allocator.Allocator)) { f(allocator.New(st, nil)) })
	p, err := st.GetPool(ctx, poolV4.Name)
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.Exclude = append(p.Spec.Exclude, netip.MustParsePrefix("10.20.0.0/28"))
	if _, err := st.UpdatePool(ctx, p); err != nil {
		t.Fatal(err)
	}
	waitFor(t, u, "the new exclude", func() bool {
		b := u.m.blocks[store.BlockRef{Pool: "a-v4", CIDR: netip.MustParsePrefix("10.20.0.0/26")}]
		return b.agg.reserved == 16 // network, gateway and the rest of 10.20.0.0/28
	})
}

// TestKubernetesLive: on the Kubernetes datastore (a real kube-apiserver
// with the CRDs and the shipped RBAC) the map, opened as the controller's
// ServiceAccount as in a cluster, lists everything once and then follows
// the objects' WATCH (no further LIST while the watch holds); the
// allocations of every node are made by one store of the same account
// (a node's own credentials write only its own node's objects).
func TestKubernetesLive(t *testing.T) {
	srv := kubetest.Start(t)
	ctx := context.Background()
	ds := config.Datastore{Type: config.DatastoreKubernetes, Prefix: "webui-live",
		Kubeconfig: srv.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-controller")}
	st, err := datastore.Open(ctx, ds, datastore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fillFixture(t, st)
	s := startUI(t, Options{Datastore: ds})
	vf, ok := s.u.currentFeed().(*viewFeed)
	if !ok {
		t.Fatalf("the map follows the Kubernetes datastore by %T, want its watch", s.u.currentFeed())
	}
	var ov overview
	s.getJSON(t, "/api/pools", 200, &ov)
	if len(ov.Pools) != 3 || ov.Pools[1].Borrowed != 1 || ov.Pools[0].InUse != 3 || ov.Error != "" {
		t.Fatalf("kubernetes store shown as %+v (error %q)", ov.Pools, ov.Error)
	}
	storeLive(t, s.u, st)
	if n := vf.v.Lists(); n != 1 {
		t.Errorf("the map listed the datastore %d times, want once (then its watch)", n)
	}
}
