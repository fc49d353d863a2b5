package datastore

import (
	"cmp"
	"context"
	"encoding/json"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/nodealloc"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
	"github.com/ipkeeper/ipkeeper/internal/store/local"
)

var (
	osV4 = ipam.Pool{Name: "v4", CIDR: netip.MustParsePrefix("10.20.0.0/16"), BlockSize: 26}
	osV6 = ipam.Pool{Name: "v6", CIDR: netip.MustParsePrefix("fd20::/64"), BlockSize: 122}
)

// kvCounter counts the calls an open makes through a real kv.Store.
type kvCounter struct {
	kv.Store
	mu                sync.Mutex
	gets, lists, txns int
}

func (c *kvCounter) count(n *int) {
	c.mu.Lock()
	*n++
	c.mu.Unlock()
}

func (c *kvCounter) Get(ctx context.Context, keys ...string) ([]kv.KeyValue, error) {
	c.count(&c.gets)
	return c.Store.Get(ctx, keys...)
}

func (c *kvCounter) List(ctx context.Context, prefix string) ([]kv.KeyValue, error) {
	c.count(&c.lists)
	return c.Store.List(ctx, prefix)
}

func (c *kvCounter) Txn(ctx context.Context, conds []kv.Cond, ops []kv.Op) error {
	_, err := c.TxnRevision(ctx, conds, ops)
	return err
}

func (c *kvCounter) TxnRevision(ctx context.Context, conds []kv.Cond, ops []kv.Op) (int64, error) {
	c.count(&c.txns)
	return kv.TxnRevision(ctx, c.Store, conds, ops)
}

func (c *kvCounter) Limits() kv.Limits { return kv.LimitsOf(c.Store) }

func (c *kvCounter) counts() [3]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return [3]int{c.gets, c.lists, c.txns}
}

// typedBackend is a datastore of one real kv backend for Open.
type typedBackend struct {
	name string
	ds   func(t *testing.T) config.Datastore
}

// typedBackends are a bbolt file in a temp dir and an embedded etcd of the
// test's own, each opened by Open as the plugin (node lock under a
// temp lock dir).
var typedBackends = []typedBackend{
	{"local", func(t *testing.T) config.Datastore {
		return config.Datastore{Type: config.DatastoreLocal, Path: t.TempDir()}
	}},
	{"etcd", func(t *testing.T) config.Datastore {
		srv := etcdtest.ForTest(t, nil)
		return config.Datastore{Type: config.DatastoreEtcd, Endpoints: []string{srv.Endpoint}, Prefix: "/openstore",
			RequestTimeout: 5 * time.Second}
	}},
}

// oldHandle is what the first layout's allocator gave one attachment.
type oldHandle struct {
	node string
	ips  []ipam.HandleIP
}

// The checked-in first-layout stores (kvbacked/migrate/testdata/README.md).
const firstLayoutDir = "../store/kvbacked/migrate/testdata"

// writeFirstLayout makes ds a store the first layout's allocator wrote: the
// checked-in bbolt file copied into a local datastore's directory, the
// checked-in etcd dump written under an etcd datastore's prefix (through
// the kv opening). It holds dual-stack handles on several nodes, handles
// holding addresses borrowed from another node's block (single-stack and
// one family of a dual-stack one), a handle under its legacy ID, a
// whereabouts allocation of no node, and a released handle (net.a1.eth0).
// It returns the live handles by (canonical) ID, as the allocator
// reported them.
func writeFirstLayout(t *testing.T, ds config.Datastore) map[string]oldHandle {
	t.Helper()
	want := "firstlayout-etcd.want.json"
	if ds.Type == config.DatastoreLocal {
		want = "firstlayout.db.want.json"
		db, err := os.ReadFile(filepath.Join(firstLayoutDir, "firstlayout.db"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ds.Path, local.FileName), db, 0o600); err != nil {
			t.Fatal(err)
		}
	} else {
		var dump struct {
			KVs []struct{ Key, Value string } `json:"kvs"`
		}
		raw, err := os.ReadFile(filepath.Join(firstLayoutDir, "firstlayout-etcd.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &dump); err != nil {
			t.Fatal(err)
		}
		kvs, err := openKV(t.Context(), ds)
		if err != nil {
			t.Fatal(err)
		}
		defer kvs.Close()
		for _, e := range dump.KVs {
			if err := kvs.Txn(t.Context(), nil, []kv.Op{{Key: e.Key, Value: []byte(e.Value)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	raw, err := os.ReadFile(filepath.Join(firstLayoutDir, want))
	if err != nil {
		t.Fatal(err)
	}
	var reported struct {
		Handles []ipam.Handle `json:"handles"`
		Blocks  []ipam.Block  `json:"blocks"`
	}
	if err := json.Unmarshal(raw, &reported); err != nil {
		t.Fatal(err)
	}
	_, handles, _ := nodealloc.CanonicalIDs(reported.Blocks, reported.Handles)
	out := map[string]oldHandle{}
	for _, h := range handles {
		out[h.ID] = oldHandle{node: cmp.Or(h.Node, store.UnaffineNode), ips: h.IPs}
	}
	if _, ok := out[ipam.HandleID("net", "a1", "eth0")]; ok || len(out) < 5 {
		t.Fatalf("%s: %d handles, net.a1.eth0 among them", want, len(out))
	}
	return out
}

// rawKeys returns every key of ds with its version, read through today's
// shared opening.
func rawKeys(t *testing.T, ds config.Datastore) map[string]int64 {
	t.Helper()
	kvs, err := openKV(t.Context(), ds)
	if err != nil {
		t.Fatal(err)
	}
	defer kvs.Close()
	es, err := kvs.List(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, e := range es {
		out[e.Key] = e.Version
	}
	return out
}

// A store written by the first layout's allocator is migrated by the first
// Open: the allocator finds every handle, borrowed addresses
// included; a second Open changes nothing (every key at the same
// version) and costs one Get.
func TestOpenMigratesFirstLayout(t *testing.T) {
	t.Setenv(LockDirEnv, t.TempDir())
	for _, b := range typedBackends {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			ds := b.ds(t)
			want := writeFirstLayout(t, ds)
			before := rawKeys(t, ds)
			if _, ok := before["meta/layout"]; ok || !slices.ContainsFunc(slices.Collect(maps.Keys(before)), func(k string) bool { return strings.HasPrefix(k, "blocks/") }) {
				t.Fatalf("not a first-layout store: %v", slices.Sorted(maps.Keys(before)))
			}
			s, err := Open(ctx, ds, Options{Plugin: true})
			if err != nil {
				t.Fatal(err)
			}
			a := allocator.New(s, nil)
			for id, h := range want {
				got, ok, err := a.Handle(ctx, h.node, id)
				if err != nil || !ok || !ipam.SameAddrs(got.IPs, h.ips) {
					t.Errorf("Handle(%s, %s) = %v, %v, %v; want %v", h.node, id, got.IPs, ok, err, h.ips)
				}
			}
			if got, ok, err := a.Handle(ctx, "node-a", ipam.HandleID("net", "a1", "eth0")); err != nil || ok {
				t.Errorf("released handle a1: %v, %v, %v", got, ok, err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			migrated := rawKeys(t, ds)
			if _, ok := migrated["meta/layout"]; !ok {
				t.Fatal("no layout marker after Open")
			}
			for k := range migrated {
				if strings.HasPrefix(k, "blocks/") || strings.HasPrefix(k, "handles/") || strings.HasPrefix(k, "affinity/") {
					t.Errorf("first-layout key %s left after Open", k)
				}
			}

			// Opened again: nothing is migrated or written.
			s, err = Open(ctx, ds, Options{Plugin: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if again := rawKeys(t, ds); !maps.Equal(migrated, again) {
				t.Fatalf("a second Open changed the store:\n%v\n%v", migrated, again)
			}
			// The cost of an open of a migrated store: one Get.
			kvs, err := openKV(ctx, ds)
			if err != nil {
				t.Fatal(err)
			}
			c := &kvCounter{Store: kvs}
			ts, _, err := openTyped(ctx, c, Warm{})
			if err != nil {
				t.Fatal(err)
			}
			if got := c.counts(); got != [3]int{1, 0, 0} {
				t.Errorf("open of a migrated store: %d gets, %d lists, %d transactions; want 1, 0, 0", got[0], got[1], got[2])
			}
			ts.Close()
		})
	}
}

// Plugins of several nodes opening one first-layout store at once (the
// DaemonSet's rollout) all succeed and agree: one conversion.
func TestOpenConcurrentMigration(t *testing.T) {
	b := typedBackends[1] // etcd: opens of several processes at once
	ctx := t.Context()
	ds := b.ds(t)
	want := writeFirstLayout(t, ds)
	const opens = 6
	var wg sync.WaitGroup
	errs := make([]error, opens)
	for i := range opens {
		wg.Go(func() {
			s, err := Open(ctx, ds, Options{})
			if err == nil {
				err = s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("open %d: %v", i, err)
		}
	}
	s, err := Open(ctx, ds, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a := allocator.New(s, nil)
	for id, h := range want {
		if got, ok, err := a.Handle(ctx, h.node, id); err != nil || !ok || !ipam.SameAddrs(got.IPs, h.ips) {
			t.Errorf("Handle(%s, %s) = %v, %v, %v; want %v", h.node, id, got.IPs, ok, err, h.ips)
		}
	}
}

// Open of an empty store writes the layout marker and nothing else
// (one Get, one List, one transaction), so the next open costs one Get
// and finds the store as the first one left it; the typed store then
// works across opens.
func TestOpenEmpty(t *testing.T) {
	t.Setenv(LockDirEnv, t.TempDir())
	for _, b := range typedBackends {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			ds := b.ds(t)
			kvs, err := openKV(ctx, ds)
			if err != nil {
				t.Fatal(err)
			}
			c := &kvCounter{Store: kvs}
			s, _, err := openTyped(ctx, c, Warm{})
			if err != nil {
				t.Fatal(err)
			}
			if got := c.counts(); got != [3]int{1, 1, 1} {
				t.Errorf("open of an empty store: %d gets, %d lists, %d transactions; want 1, 1, 1", got[0], got[1], got[2])
			}
			s.Close()
			if keys := slices.Sorted(maps.Keys(rawKeys(t, ds))); !slices.Equal(keys, []string{"meta/converted", "meta/layout"}) {
				t.Fatalf("Open of an empty store wrote %v, want the layout marker only", keys)
			}
			kvs, err = openKV(ctx, ds)
			if err != nil {
				t.Fatal(err)
			}
			c = &kvCounter{Store: kvs}
			if s, _, err = openTyped(ctx, c, Warm{}); err != nil {
				t.Fatal(err)
			}
			s.Close()
			if got := c.counts(); got != [3]int{1, 0, 0} {
				t.Errorf("open of a marked store: %d gets, %d lists, %d transactions; want 1, 0, 0", got[0], got[1], got[2])
			}

			st, err := Open(ctx, ds, Options{Plugin: true})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.CreatePool(ctx, store.Pool{Spec: osV4}); err != nil {
				t.Fatal(err)
			}
			blk := ipam.NewBlock(osV4, osV4.BlockAt(0), "node-a")
			if _, err := st.CreateClaim(ctx, store.Claim{BlockRef: store.BlockRef{Pool: osV4.Name, CIDR: blk.CIDR}, Node: "node-a"}); err != nil {
				t.Fatal(err)
			}
			if _, err := st.CreateNode(ctx, store.Node{Name: "node-a", Blocks: []ipam.Block{blk}}); err != nil {
				t.Fatal(err)
			}
			st.Close()
			st, err = Open(ctx, ds, Options{Plugin: true})
			if err != nil {
				t.Fatal(err)
			}
			if p, err := st.GetPool(ctx, osV4.Name); err != nil || p.Spec.Deleting {
				t.Fatalf("pool after the second open: %+v, %v", p, err)
			}
			if n, err := st.GetNode(ctx, "node-a"); err != nil || len(n.Blocks) != 1 {
				t.Fatalf("node object written before the marker, after the second open: %+v, %v", n, err)
			}
			st.Close()
			// The marker, the pool, the claim and its index, the node's
			// head and block.
			keys := rawKeys(t, ds)
			if keys["meta/layout"] == 0 || keys[kvbacked.NodeHeadKey("node-a")] == 0 || keys[kvbacked.NodeBlockKey("node-a", store.BlockRef{Pool: osV4.Name, CIDR: blk.CIDR})] == 0 || len(keys) != 7 {
				t.Fatalf("a store of typed objects is only marked: %v", keys)
			}
		})
	}
}
