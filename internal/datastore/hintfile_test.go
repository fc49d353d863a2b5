package datastore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
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
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
)

// hintTest is an etcd datastore of the test's own with a lock directory
// of its own, opened as the plugin opens it.
type hintTest struct {
	t  *testing.T
	ds config.Datastore
	// v4 is the IPv4 pool of the ADDs (osV4 unless a test sets another).
	v4 ipam.Pool
}

func newHintTest(t *testing.T) *hintTest {
	t.Setenv(LockDirEnv, t.TempDir())
	srv := etcdtest.ForTest(t, nil)
	return &hintTest{t: t, v4: osV4, ds: config.Datastore{Type: config.DatastoreEtcd, Endpoints: []string{srv.Endpoint},
		Prefix: "/hints", RequestTimeout: 5 * time.Second}}
}

func hintReq(node, container string) allocator.Request {
	return hintReqOf(osV4, node, container)
}

func hintReqOf(v4 ipam.Pool, node, container string) allocator.Request {
	return allocator.Request{
		Handle: ipam.Handle{ID: ipam.HandleID("net", container, "eth0"), Network: "net", ContainerID: container, IfName: "eth0", Node: node},
		Sets:   [][]string{{v4.Name}, {osV6.Name}}, Define: []ipam.Pool{v4, osV6},
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
	got, warmed, err := h.tryAdd(node, container)
	if err != nil {
		h.t.Fatalf("ADD %s on %s: %v", container, node, err)
	}
	return got, warmed
}

// tryAdd is add returning the ADD's error.
func (h *hintTest) tryAdd(node, container string) (ipam.Handle, Warmed, error) {
	h.t.Helper()
	ctx := h.t.Context()
	var warmed Warmed
	s, err := Open(ctx, h.ds, Options{Plugin: true, Warm: Warm{Node: node, Pools: []string{h.v4.Name, osV6.Name}}, Warmed: &warmed})
	if err != nil {
		h.t.Fatal(err)
	}
	defer s.Close()
	a := allocator.New(s, nil)
	if warmed.OK {
		a.Remember(warmed.Node, warmed.Pools, warmed.Claims...)
	}
	got, err := a.Allocate(ctx, hintReqOf(h.v4, node, container))
	return got, warmed, err
}

// del is a plugin DEL.
func (h *hintTest) del(node, container string) Warmed {
	h.t.Helper()
	ctx := h.t.Context()
	var warmed Warmed
	s, err := Open(ctx, h.ds, Options{Plugin: true, Warm: Warm{Node: node}, Warmed: &warmed})
	if err != nil {
		h.t.Fatal(err)
	}
	defer s.Close()
	a := allocator.New(s, nil)
	if warmed.OK {
		a.Remember(warmed.Node, warmed.Pools, warmed.Claims...)
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
	s, err := Open(h.t.Context(), h.ds, Options{})
	if err != nil {
		h.t.Fatal(err)
	}
	defer s.Close()
	all, err := allocator.New(s, nil).Handles(h.t.Context())
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

// TestHintReadsNothing: after a plugin ADD on etcd the next process of
// the node takes the layout marker's version, the store's identity, the
// pools and the node object from the hint file and reads nothing: its ADD
// is one transaction (guarded by all it took), its DEL too. A hint that
// lacks a pool the config names is used for the node object alone: one
// read of the marker, identity and pools, and the write.
func TestHintReadsNothing(t *testing.T) {
	h := newHintTest(t)
	if _, w := h.add("node-a", "c0"); w.Hinted {
		t.Fatal("the first ADD of a store used a hint")
	}
	if _, err := os.Stat(h.path("node-a")); err != nil {
		t.Fatalf("no hint file after an ADD: %v", err)
	}
	for i, c := range []string{"c1", "c2"} {
		if _, w := h.add("node-a", c); !w.Unread || w.Store == "" {
			t.Fatalf("ADD %d after an ADD: warmed %+v; want everything from the hint", i, w)
		}
	}
	count := func(w Warm, container string) ([3]int, Warmed) {
		t.Helper()
		kvs, err := openKV(t.Context(), h.ds)
		if err != nil {
			t.Fatal(err)
		}
		defer kvs.Close()
		c := &kvCounter{Store: kvs}
		s := kvbacked.New(c)
		warmed, ok := s.TakeHint(w)
		if !ok {
			if _, warmed, err = openTyped(t.Context(), c, w); err != nil {
				t.Fatal(err)
			}
		}
		a := allocator.New(s, nil)
		a.Remember(warmed.Node, warmed.Pools, warmed.Claims...)
		if _, err := a.Allocate(t.Context(), hintReq("node-a", container)); err != nil {
			t.Fatal(err)
		}
		return c.counts(), warmed
	}
	full := loadHint(h.path("node-a"), "node-a")
	got, warmed := count(Warm{Node: "node-a", Pools: []string{osV4.Name, osV6.Name}, Hint: full}, "c3")
	if got != [3]int{0, 0, 1} || !warmed.Unread || len(warmed.Node.Handles) != 3 || len(warmed.Pools) != 2 {
		t.Fatalf("hinted ADD: %d gets, %d lists, %d transactions, warmed %+v; want one transaction, the object with 3 handles and 2 pools",
			got[0], got[1], got[2], warmed)
	}
	partial := *full
	partial.Pools = partial.Pools[:1]
	partial.Version = "" // c3 was written since: the full hint is stale
	if got, _ := count(Warm{Node: "node-a", Pools: []string{osV4.Name, osV6.Name}, Hint: &partial}, "c4"); got[2] != 1 || got[0] < 1 {
		t.Fatalf("ADD with a hint of one pool: %d gets, %d lists, %d transactions; want reads and one transaction", got[0], got[1], got[2])
	}
	if w := h.del("node-a", "c1"); !w.Unread {
		t.Fatal("DEL after an ADD did not take the hint")
	}
	h.want("c0", "c2", "c3", "c4")
}

// TestHintStale: a node object written by another process (the CLI, the
// controller, another plugin without the lock) since the hint was left
// makes the hinted write conflict; the ADD then reads the object and
// nothing written meanwhile is lost.
func TestHintStale(t *testing.T) {
	h := newHintTest(t)
	h.add("node-a", "c0")
	// Another writer, not through the plugin's open.
	s, err := Open(t.Context(), h.ds, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := allocator.New(s, nil).Allocate(t.Context(), hintReq("node-a", "other")); err != nil {
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
	kvs, err := openKV(t.Context(), h.ds)
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
	// The old store's object and identity, at the versions the new one
	// has (marker, identity key, pools, node object): only the identity's
	// value tells the stores apart.
	old.Version, old.Layout, old.StoreAt, old.Pools = cur.Version, cur.Layout, cur.StoreAt, cur.Pools
	saveHint(h.path("node-a"), *old)
	h.add("node-a", "new2")
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
		{"an address held twice", func() {
			// The current hint, its node object with a second record
			// holding the first record's addresses.
			h.add("node-a", "current")
			cur, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			line, value, _ := bytes.Cut(cur, []byte{'\n'})
			var node map[string]any
			if err := json.Unmarshal(value, &node); err != nil {
				t.Fatal(err)
			}
			hs := node["handles"].([]any)
			twin := maps.Clone(hs[0].(map[string]any))
			twin["id"] = "net.twin.eth0"
			node["handles"] = append(hs, twin)
			value, _ = json.Marshal(node)
			_ = os.Remove(path)
			_ = os.WriteFile(path, append(append(line, '\n'), value...), 0o600)
		}},
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

// TestHintPoolChanged: a pool changed since the hint was left (disabled
// by the CLI) fails the hinted write's guard; the ADD reads the pool again
// and allocates nothing from the disabled pool — whether its first write
// is the node object (a block with room) or the claim of a new block (the
// node's blocks full), after which the allocator must forget the hinted
// pool (store.ErrStale) rather than retry with it.
func TestHintPoolChanged(t *testing.T) {
	for _, full := range []bool{false, true} {
		t.Run(fmt.Sprint("blocks full=", full), func(t *testing.T) {
			h := newHintTest(t)
			if full {
				h.v4 = ipam.Pool{Name: "small", CIDR: netip.MustParsePrefix("10.22.0.0/24"), BlockSize: 30}
			}
			h.add("node-a", "c0")
			want := []string{"c0"}
			// Fill the node's blocks, or make one more ADD (a hint with
			// room).
			for i := 1; full && !h.roomless("node-a") || !full && i == 1; i++ {
				c := fmt.Sprint("c", i)
				h.add("node-a", c)
				want = append(want, c)
			}
			s, err := Open(t.Context(), h.ds, Options{})
			if err != nil {
				t.Fatal(err)
			}
			p, err := s.GetPool(t.Context(), h.v4.Name)
			if err != nil {
				t.Fatal(err)
			}
			p.Spec.Disabled = true
			if _, err := s.UpdatePool(t.Context(), p); err != nil {
				t.Fatal(err)
			}
			_ = s.Close()
			got, w, err := h.tryAdd("node-a", "late")
			if !w.Unread {
				t.Fatal("the hint was not taken")
			}
			for _, ip := range got.IPs {
				if ip.Pool == h.v4.Name {
					t.Fatalf("ADD after %s was disabled got %s from it (err %v)", h.v4.Name, ip.Addr, err)
				}
			}
			if err == nil {
				t.Fatalf("ADD with its only IPv4 pool disabled succeeded: %v", got.IPs)
			}
			h.want(want...)
		})
	}
}

// roomless reports whether node's object holds blocks of the test's IPv4
// pool and none of them has a free address.
func (h *hintTest) roomless(node string) bool {
	h.t.Helper()
	s, err := Open(h.t.Context(), h.ds, Options{})
	if err != nil {
		h.t.Fatal(err)
	}
	defer s.Close()
	n, err := s.GetNode(h.t.Context(), node)
	if errors.Is(err, store.ErrNotFound) {
		return false
	}
	if err != nil {
		h.t.Fatal(err)
	}
	blocks := 0
	for _, b := range n.Blocks {
		if b.Pool != h.v4.Name {
			continue
		}
		blocks++
		if b.FreeCount(h.v4) > 0 {
			return false
		}
	}
	return blocks > 0
}

// TestHintLayoutChanged: a store whose layout marker changed since the
// hint was left (a newer ipkeeper migrated it) fails the hinted write's
// guard, and the ADD returns "try again" with nothing written.
func TestHintLayoutChanged(t *testing.T) {
	h := newHintTest(t)
	h.add("node-a", "c0")
	h.add("node-a", "c1")
	kvs, err := openKV(t.Context(), h.ds)
	if err != nil {
		t.Fatal(err)
	}
	es, err := kvs.Get(t.Context(), "meta/layout", kvbacked.NodeHeadKey("node-a"))
	if err != nil || es[0].Version == 0 || es[1].Version == 0 {
		t.Fatalf("layout marker and node-a's head %+v, %v", es, err)
	}
	if err := kvs.Txn(t.Context(), nil, []kv.Op{{Key: "meta/layout", Value: []byte("4")}}); err != nil {
		t.Fatal(err)
	}
	_ = kvs.Close()
	_, w, err := h.tryAdd("node-a", "c2")
	if !w.Unread {
		t.Fatal("the hint was not taken")
	}
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("ADD on a store of another layout: %v; want ErrUnavailable", err)
	}
	kvs, err = openKV(t.Context(), h.ds)
	if err != nil {
		t.Fatal(err)
	}
	defer kvs.Close()
	after, err := kvs.Get(t.Context(), kvbacked.NodeHeadKey("node-a"))
	if err != nil || after[0].Version != es[1].Version {
		t.Fatalf("node object at version %d after the refused ADD, was %d (%v)", after[0].Version, es[1].Version, err)
	}
}

// TestHintFullButFreed: a hint whose blocks are full while the stored
// object has room again (another process released an address since) must
// not make the ADD claim a block: claims, loans and "exhausted" are decided
// on the object as stored, so the ADD reads it and takes the freed address
// — a claim made from the stale copy would stay orphaned when the copy's
// write failed.
func TestHintFullButFreed(t *testing.T) {
	h := newHintTest(t)
	h.v4 = ipam.Pool{Name: "small", CIDR: netip.MustParsePrefix("10.23.0.0/24"), BlockSize: 30}
	var added []string
	for i := 0; !h.roomless("node-a"); i++ {
		c := fmt.Sprint("c", i)
		h.add("node-a", c)
		added = append(added, c)
	}
	s, err := Open(t.Context(), h.ds, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := allocator.New(s, nil).Release(t.Context(), "node-a", ipam.HandleID("net", added[0], "eth0")); err != nil {
		t.Fatal(err)
	}
	before, err := s.ListClaims(t.Context(), store.ClaimSelector{Node: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	if _, w := h.add("node-a", "late"); !w.Unread {
		t.Fatal("the hint was not taken")
	}
	s, err = Open(t.Context(), h.ds, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	after, err := s.ListClaims(t.Context(), store.ClaimSelector{Node: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Fatalf("the ADD claimed %d blocks while the node had a free address", len(after)-len(before))
	}
	h.want(append(added[1:], "late")...)
}
