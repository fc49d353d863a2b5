package migrate_test

import (
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked/kvbackedtest"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked/migrate"
)

// The pools of the whole-node stores: small has two blocks (node-a and
// node-b claim them, node-c borrows from node-a), big holds node-big's
// many pods.
var (
	wholeSmall = ipam.Pool{Name: "small", CIDR: netip.MustParsePrefix("10.8.0.0/27"), BlockSize: 28}
	wholeBig   = ipam.Pool{Name: "big", CIDR: netip.MustParsePrefix("10.20.0.0/16"), BlockSize: 26}
)

// bigPods is how many pods node-big holds: more parts than one
// transaction of etcd carries.
const bigPods = 210

// wholeStore is a store as the layout of whole node objects wrote it
// (every key and value), and its node objects.
type wholeStore struct {
	keys  map[string][]byte
	nodes map[string]store.Node // Normalized, Version ""
}

var (
	wholeOnce    sync.Once
	wholeFixture wholeStore
)

// pod is the request of pod-<container>'s eth0 on node from pool.
func pod(node, container, pool string) allocator.Request {
	return allocator.Request{Handle: podHandle(node, container), Sets: [][]string{{pool}}}
}

// makeWholeStore allocates on a bbolt file through the allocator (node-a,
// node-b, node-c borrowing from node-a, node-big with bigPods pods), then
// rewrites its node objects as the layout of whole node objects keeps
// them: nodes/<node> = store.MarshalNode, the lends keys of each
// object's borrowers, claims as they are, meta/layout = "2".
func makeWholeStore(t *testing.T) wholeStore {
	t.Helper()
	wholeOnce.Do(func() {
		ctx := t.Context()
		kvs := kvbackedtest.OpenLocalKV(t)
		defer kvs.Close()
		s := kvbacked.New(kvs)
		a := allocator.New(s, nil)
		for _, p := range []ipam.Pool{wholeSmall, wholeBig} {
			if _, err := a.EnsurePool(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		for _, r := range []allocator.Request{pod("node-a", "a0", "small"), pod("node-a", "a1", "small"), pod("node-b", "b0", "small"), pod("node-c", "c0", "small")} {
			if _, err := a.Allocate(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		for i := range bigPods {
			if _, err := a.Allocate(ctx, pod("node-big", fmt.Sprintf("big%d", i), "big")); err != nil {
				t.Fatal(err)
			}
		}
		nodes, err := s.ListNodes(ctx, store.NodeSelector{})
		if err != nil {
			t.Fatal(err)
		}
		all, err := kvs.List(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		w := wholeStore{keys: map[string][]byte{}, nodes: map[string]store.Node{}}
		for _, e := range all {
			if !strings.HasPrefix(e.Key, "nodes/") && !strings.HasPrefix(e.Key, "meta/") {
				w.keys[e.Key] = e.Value
			}
		}
		for _, n := range nodes {
			val, err := store.MarshalNode(n)
			if err != nil {
				t.Fatal(err)
			}
			w.keys["nodes/"+n.Name] = val
			for _, b := range n.LendsTo() {
				w.keys["lends/"+b+"/"+n.Name] = []byte{}
			}
			n.Version = ""
			w.nodes[n.Name] = n.Normalized()
		}
		w.keys["meta/layout"], w.keys["meta/converted"] = []byte("2"), []byte("1")
		if len(w.nodes["node-c"].Loans) != 1 || len(w.nodes["node-big"].Handles) != bigPods {
			t.Fatalf("fixture: node-c's loans %v, node-big's %d records", w.nodes["node-c"].Loans, len(w.nodes["node-big"].Handles))
		}
		wholeFixture = w
	})
	if wholeFixture.keys == nil {
		t.Fatal("no whole-node store (its making failed)")
	}
	return wholeFixture
}

// openWhole opens a fresh store of backend b holding the whole-node store.
func openWhole(t *testing.T, b kvbackedtest.KVBackend) (kv.Store, wholeStore) {
	t.Helper()
	w := makeWholeStore(t)
	kvs := b.Open(t)
	var ops []kv.Op
	for _, k := range slices.Sorted(maps.Keys(w.keys)) {
		ops = append(ops, kv.Op{Key: k, Value: w.keys[k]})
	}
	for len(ops) > 0 {
		n := min(len(ops), 100)
		if err := kvs.Txn(t.Context(), nil, ops[:n]); err != nil {
			t.Fatal(err)
		}
		ops = ops[n:]
	}
	return kvs, w
}

// checkSplit fails unless kvs is of this layout, holds every node object
// of w as it was, and no whole key of a node object.
func checkSplit(t *testing.T, kvs kv.Store, w wholeStore) {
	t.Helper()
	ctx := t.Context()
	if l, err := kvbacked.ReadLayout(ctx, kvs); err != nil || l != kvbacked.LayoutTyped {
		t.Fatalf("layout %v, %v; want this layout", l, err)
	}
	checkNodes(t, kvbacked.New(kvs), w)
	for k := range raw(t, kvs, "nodes/") {
		if !strings.Contains(strings.TrimPrefix(k, "nodes/"), "/") {
			t.Errorf("whole key %s left", k)
		}
	}
}

// checkNodes fails unless s holds exactly w's node objects.
func checkNodes(t *testing.T, s *kvbacked.Store, w wholeStore) {
	t.Helper()
	nodes, err := s.ListNodes(t.Context(), store.NodeSelector{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]store.Node{}
	for _, n := range nodes {
		n.Version = ""
		got[n.Name] = n.Normalized()
	}
	if !reflect.DeepEqual(got, w.nodes) {
		for name := range w.nodes {
			if !reflect.DeepEqual(got[name], w.nodes[name]) {
				t.Errorf("node %s after the split:\n%+v\nwant\n%+v", name, got[name], w.nodes[name])
			}
		}
		t.Fatalf("nodes %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(w.nodes)))
	}
	lenders, err := s.ListNodes(t.Context(), store.NodeSelector{LendsTo: "node-c"})
	if err != nil || len(lenders) != 1 || lenders[0].Name != "node-a" {
		t.Errorf("lenders of node-c: %v, %v; want node-a", lenders, err)
	}
}

// A store of whole node objects (marker "2": four nodes, a borrower
// and its lender, a node of more parts than one transaction carries) is
// split by Ensure: every node object reads back as it was, no whole key
// is left, a second Ensure changes nothing, and the allocator allocates
// and releases on it (a borrowed address included).
func TestSplitWholeNodes(t *testing.T) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			kvs, w := openWhole(t, b)
			defer kvs.Close()
			cs := &kvbackedtest.Counting{Store: kvs}
			if err := migrate.Ensure(ctx, cs); err != nil {
				t.Fatal(err)
			}
			bigTxns := 0
			for _, ops := range cs.Ops() {
				if slices.ContainsFunc(ops, func(op kv.Op) bool { return strings.HasPrefix(op.Key, "nodes/node-big/record/") }) {
					bigTxns++
					if len(ops) > 128 {
						t.Errorf("a transaction of %d operations", len(ops))
					}
				}
			}
			if bigTxns < 2 {
				t.Errorf("node-big's records written in %d transactions, want batches", bigTxns)
			}
			checkSplit(t, kvs, w)
			before := snapshot(t, kvs, "")
			if err := migrate.Ensure(ctx, kvs); err != nil {
				t.Fatal(err)
			}
			if after := snapshot(t, kvs, ""); !maps.EqualFunc(before, after, func(x, y kv.KeyValue) bool { return x.Version == y.Version }) {
				t.Fatal("a second Ensure changed the store")
			}
			s := kvbacked.New(kvs)
			a := allocator.New(s, nil)
			h, err := a.Allocate(ctx, pod("node-big", "new", "big"))
			if err != nil {
				t.Fatal(err)
			}
			if freed, err := a.Release(ctx, "node-big", h.ID); err != nil || len(freed) != 1 || freed[0] != h.IPs[0].Addr {
				t.Fatalf("Release(node-big, %s) = %v, %v; want %v", h.ID, freed, err, h.IPs)
			}
			borrowed := ipam.HandleID("net", "c0", "eth0")
			got, ok, err := a.Handle(ctx, "node-c", borrowed)
			if err != nil || !ok || len(got.IPs) != 1 {
				t.Fatalf("Handle(node-c, %s) = %+v, %v, %v", borrowed, got, ok, err)
			}
			if freed, err := a.Release(ctx, "node-c", borrowed); err != nil || len(freed) != 1 || freed[0] != got.IPs[0].Addr {
				t.Fatalf("Release(node-c, %s) = %v, %v; want %v", borrowed, freed, err, got.IPs)
			}
			lender, err := s.GetNode(ctx, "node-a")
			if err != nil {
				t.Fatal(err)
			}
			if blk, ok := lender.Block(store.BlockRef{Pool: "small", CIDR: got.IPs[0].Block}); !ok || blk.Owner(got.IPs[0].Addr) != "" || len(lender.LendsTo()) != 0 {
				t.Fatalf("the lender after the release: block %+v (%v), lends to %v", blk, ok, lender.LendsTo())
			}
		})
	}
}
