package datastore

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
)

// hintTest is an etcd datastore of the test's own with a lock directory
// of its own, opened as the plugin opens it.
type hintTest struct {
	t  *testing.T
	ds config.Datastore
}

func newHintTest(t *testing.T) *hintTest {
	t.Setenv(LockDirEnv, t.TempDir())
	srv := etcdtest.ForTest(t, nil)
	return &hintTest{t: t, ds: config.Datastore{Type: config.DatastoreEtcd, Endpoints: []string{srv.Endpoint},
		Prefix: "/hints", RequestTimeout: 5 * time.Second}}
}

func hintReq(node, container string) allocator.Request {
	return allocator.Request{
		Handle: ipam.Handle{ID: ipam.HandleID("net", container, "eth0"), Network: "net", ContainerID: container, IfName: "eth0", Node: node},
		Sets:   [][]string{{osV4.Name}, {osV6.Name}}, Define: []ipam.Pool{osV4, osV6},
	}
}

// path is node's hint file.
func (h *hintTest) path(node string) string {
	return hintPath(lockDir(), lockName(etcdConfig(h.ds)), node)
}

// add is a plugin ADD: a warm open of the node and the pools, the
// allocation, the close.
func (h *hintTest) add(node, container string) (ipam.Handle, Warmed) {
	h.t.Helper()
	ctx := h.t.Context()
	s, warmed, err := OpenStoreWarm(ctx, h.ds, false, Warm{Node: node, Pools: []string{osV4.Name, osV6.Name}})
	if err != nil {
		h.t.Fatal(err)
	}
	defer s.Close()
	a := allocator.NewStoreAllocator(s, nil)
	if warmed.OK {
		a.Remember(warmed.Node, warmed.Pools)
	}
	got, err := a.Allocate(ctx, hintReq(node, container))
	if err != nil {
		h.t.Fatalf("ADD %s on %s: %v", container, node, err)
	}
	return got, warmed
}

// del is a plugin DEL.
func (h *hintTest) del(node, container string) Warmed {
	h.t.Helper()
	ctx := h.t.Context()
	s, warmed, err := OpenStoreWarm(ctx, h.ds, false, Warm{Node: node})
	if err != nil {
		h.t.Fatal(err)
	}
	defer s.Close()
	a := allocator.NewStoreAllocator(s, nil)
	if warmed.OK {
		a.Remember(warmed.Node, warmed.Pools)
	}
	if _, err := a.Release(ctx, node, ipam.HandleID("net", container, "eth0")); err != nil {
		h.t.Fatalf("DEL %s on %s: %v", container, node, err)
	}
	return warmed
}

// handles lists every handle of the store (shared open) and fails the test
// on an address held twice.
func (h *hintTest) handles() map[string]ipam.Handle {
	h.t.Helper()
	s, err := OpenStore(h.t.Context(), h.ds, true)
	if err != nil {
		h.t.Fatal(err)
	}
	defer s.Close()
	all, err := allocator.NewStoreAllocator(s, nil).Handles(h.t.Context())
	if err != nil {
		h.t.Fatal(err)
	}
	out, seen := map[string]ipam.Handle{}, map[string]string{}
	for _, x := range all {
		out[x.ID] = x
		for _, ip := range x.IPs {
			if prev, dup := seen[ip.Addr.String()]; dup {
				h.t.Fatalf("%s held by %s and %s", ip.Addr, prev, x.ID)
			}
			seen[ip.Addr.String()] = x.ID
		}
	}
	return out
}

// want fails the test unless the store holds exactly the containers'
// handles.
func (h *hintTest) want(containers ...string) {
	h.t.Helper()
	got := h.handles()
	var ids []string
	for id := range got {
		ids = append(ids, id)
	}
	var want []string
	for _, c := range containers {
		want = append(want, ipam.HandleID("net", c, "eth0"))
	}
	slices.Sort(ids)
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		h.t.Fatalf("handles %v; want %v", ids, want)
	}
}

// TestHintSkipsTheNodeRead: after a plugin ADD on etcd the next process of
// the node takes the node object from the hint file (no read of it), and
// its ADD and DEL are each one transaction at the hinted version.
func TestHintSkipsTheNodeRead(t *testing.T) {
	h := newHintTest(t)
	if _, w := h.add("node-a", "c0"); w.Hinted {
		t.Fatal("the first ADD of a store used a hint")
	}
	if _, err := os.Stat(h.path("node-a")); err != nil {
		t.Fatalf("no hint file after an ADD: %v", err)
	}
	for i, c := range []string{"c1", "c2"} {
		if _, w := h.add("node-a", c); !w.Hinted || w.Store == "" {
			t.Fatalf("ADD %d after an ADD: warmed %+v; want the hint of the store", i, w)
		}
	}
	// Counted: the open's one Get (marker, identity, pools) and one
	// transaction, never a read of the node object.
	kvs, err := Open(t.Context(), h.ds)
	if err != nil {
		t.Fatal(err)
	}
	c := &kvCounter{Store: kvs}
	ts, warmed, err := openTyped(t.Context(), c, Warm{Node: "node-a", Pools: []string{osV4.Name, osV6.Name}, Hint: loadHint(h.path("node-a"), "node-a")})
	if err != nil {
		t.Fatal(err)
	}
	if !warmed.Hinted || len(warmed.Node.Handles) != 3 {
		t.Fatalf("warmed %+v; want the hinted object with 3 handles", warmed)
	}
	a := allocator.NewStoreAllocator(ts, nil)
	a.Remember(warmed.Node, warmed.Pools)
	if _, err := a.Allocate(t.Context(), hintReq("node-a", "c3")); err != nil {
		t.Fatal(err)
	}
	if got := c.counts(); got != [3]int{1, 0, 1} {
		t.Fatalf("hinted open and ADD: %d gets, %d lists, %d transactions; want 1, 0, 1", got[0], got[1], got[2])
	}
	_ = kvs.Close()
	if w := h.del("node-a", "c1"); !w.Hinted {
		t.Fatal("DEL after an ADD on another store object did not use the hint")
	}
	h.want("c0", "c2", "c3")
}

// TestHintStale: a node object written by another process (the CLI, the
// controller, another plugin without the lock) since the hint was left
// makes the hinted write conflict; the ADD then reads the object and
// nothing written meanwhile is lost.
func TestHintStale(t *testing.T) {
	h := newHintTest(t)
	h.add("node-a", "c0")
	// Another writer, not through the plugin's open.
	s, err := OpenStore(t.Context(), h.ds, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := allocator.NewStoreAllocator(s, nil).Allocate(t.Context(), hintReq("node-a", "other")); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	if _, w := h.add("node-a", "c1"); !w.Hinted {
		t.Fatal("the stale hint was not tried")
	}
	h.want("c0", "other", "c1")
	// The conflict replaced the hint by the object as read and written.
	if _, w := h.add("node-a", "c2"); !w.Hinted {
		t.Fatal("no hint after a conflict")
	}
	h.want("c0", "other", "c1", "c2")
}

// TestHintOfAnotherStore: a hint left by a store that is gone (etcd wiped
// and set up again at the same endpoints), whose version happens to be
// the version the node object has in the new store, is not taken: its
// object is not this store's, and a compare-and-swap at that version
// would succeed and overwrite the new store's handles.
func TestHintOfAnotherStore(t *testing.T) {
	h := newHintTest(t)
	h.add("node-a", "old0")
	h.add("node-a", "old1")
	old := loadHint(h.path("node-a"), "node-a")
	if old == nil || old.Store == "" {
		t.Fatalf("hint %+v; want one naming the store", old)
	}
	// Wipe the store: every key under the prefix.
	kvs, err := Open(t.Context(), h.ds)
	if err != nil {
		t.Fatal(err)
	}
	all, err := kvs.List(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range all {
		if err := kvs.Txn(t.Context(), nil, []kv.Op{{Key: e.Key, Delete: true}}); err != nil {
			t.Fatal(err)
		}
	}
	_ = kvs.Close()
	removeHint(h.path("node-a"))
	h.add("node-a", "new0")
	h.add("node-a", "new1")
	cur := loadHint(h.path("node-a"), "node-a")
	if cur == nil || cur.Store == old.Store {
		t.Fatalf("hint of the new store %+v; want another identity than %q", cur, old.Store)
	}
	// The old store's object, at the version the new one has.
	old.Version = cur.Version
	saveHint(h.path("node-a"), *old)
	if _, w := h.add("node-a", "new2"); w.Hinted {
		t.Fatal("a hint of another store was taken")
	}
	h.want("new0", "new1", "new2")
}

// TestHintFileRefused: hint files that are not private regular files of
// the caller, or not of the node, are not read; the ADD reads the store.
func TestHintFileRefused(t *testing.T) {
	h := newHintTest(t)
	h.add("node-a", "c0")
	path := h.path("node-a")
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(t.TempDir(), "hint")
	if err := os.WriteFile(elsewhere, good, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		plant func()
	}{
		{"symlink", func() { _ = os.Remove(path); _ = os.Symlink(elsewhere, path) }},
		{"fifo", func() {
			_ = os.Remove(path)
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"directory", func() { _ = os.Remove(path); _ = os.Mkdir(path, 0o700) }},
		{"garbage", func() { _ = os.RemoveAll(path); _ = os.WriteFile(path, []byte("not a hint"), 0o600) }},
		{"torn", func() { _ = os.Remove(path); _ = os.WriteFile(path, good[:len(good)/2], 0o600) }},
		{"other node", func() { _ = os.Remove(path); _ = os.WriteFile(path, good, 0o600) }},
	}
	for i, tc := range cases {
		tc.plant()
		node := "node-a"
		if tc.name == "other node" {
			// node-a's file under node-b's name.
			_ = os.Rename(path, h.path("node-b"))
			node = "node-b"
		}
		got, w := h.add(node, "x"+string(rune('0'+i)))
		if w.Hinted {
			t.Errorf("%s: the hint file was used", tc.name)
		}
		if len(got.IPs) != 2 {
			t.Errorf("%s: ADD gave %v", tc.name, got.IPs)
		}
	}
	if fi, err := os.Lstat(elsewhere); err != nil || fi.Mode()&os.ModeSymlink != 0 {
		t.Fatalf("the symlink's target: %v %v", fi, err)
	}
	h.handles()
}
