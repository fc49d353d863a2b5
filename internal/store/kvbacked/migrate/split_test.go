package migrate_test

import (
	"context"
	"errors"
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
	"github.com/ipkeeper/ipkeeper/internal/nodealloc"
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
	w.nodes = maps.Clone(w.nodes) // a test may change its copy
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
			if l, err := kvbacked.ReadLayout(ctx, kvs); err != nil || l != kvbacked.LayoutWholeNodes {
				t.Fatalf("layout of the whole-node store: %v, %v", l, err)
			}
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

// A split that dies before any one of its transactions (kept small, so
// there are many) and is run again ends as one that never died; a store
// left marked with whole keys still in it (a death after the marker)
// reads as the split store.
func TestSplitResumes(t *testing.T) {
	small := kv.Limits{MaxOps: 16}
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			crashes := 0
			for crash := 1; crash <= 80; crash++ { // bounded: ends when a split needs fewer transactions
				kvs, w := openWhole(t, b)
				cs := &kvbackedtest.Counting{Store: kvs, TxnLimits: &small, FailTxn: crash}
				err := migrate.Ensure(t.Context(), cs)
				if err == nil {
					cs.Close()
					break
				}
				if !errors.Is(err, kvbackedtest.ErrCrash) {
					t.Fatalf("crash before txn %d: %v", crash, err)
				}
				crashes++
				if l, _ := kvbacked.ReadLayout(t.Context(), kvs); l == kvbacked.LayoutTyped {
					checkNodes(t, kvbacked.New(kvs), w)
				}
				cs.FailTxn = 0
				if err := migrate.Ensure(t.Context(), cs); err != nil {
					t.Fatalf("Ensure after a crash before txn %d: %v", crash, err)
				}
				checkSplit(t, kvs, w)
				cs.Close()
			}
			if crashes < 20 {
				t.Fatalf("only %d crash points: transactions not bounded by the limits", crashes)
			}
		})
	}
}

// Opens of this version running Ensure at once on one store of whole
// node objects all succeed, and the store is split once.
func TestSplitConcurrent(t *testing.T) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			kvs, w := openWhole(t, b)
			defer kvs.Close()
			var wg sync.WaitGroup
			errs := make([]error, 4)
			for i := range errs {
				wg.Go(func() { errs[i] = migrate.Ensure(t.Context(), kvs) })
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			checkSplit(t, kvs, w)
		})
	}
}

// earlierGet reads node object name as the earlier version does: its
// whole key, decoded (store.UnmarshalNode is that version's decoder),
// and the key's version.
func earlierGet(ctx context.Context, kvs kv.Store, name string) (store.Node, int64, error) {
	es, err := kvs.Get(ctx, "nodes/"+name)
	if err != nil {
		return store.Node{}, 0, err
	}
	if es[0].Version == 0 {
		return store.Node{}, 0, store.ErrNotFound
	}
	n, err := store.UnmarshalNode(name, es[0].Value)
	return n, es[0].Version, err
}

// earlierWrite writes n as the earlier version's UpdateNode does (its
// CreateNode when v is 0): the whole key compared at version v, put with
// the lends keys of its borrowers, in one transaction; hint, when set,
// is the condition of a write from a hint (the marker at the hinted
// version, with the value "2").
func earlierWrite(ctx context.Context, kvs kv.Store, n store.Node, v int64, hint *kv.Cond) error {
	val, err := store.MarshalNode(n)
	if err != nil {
		return err
	}
	conds := []kv.Cond{{Key: "nodes/" + n.Name, Version: v}}
	if hint != nil {
		conds = append([]kv.Cond{*hint}, conds...)
	}
	ops := []kv.Op{{Key: "nodes/" + n.Name, Value: val}}
	for _, b := range n.LendsTo() {
		ops = append(ops, kv.Op{Key: "lends/" + b + "/" + n.Name, Value: []byte{}})
	}
	return kvs.Txn(ctx, conds, ops)
}

// writes reports whether a transaction puts key = value.
func writes(ops []kv.Op, key, value string) bool {
	return slices.ContainsFunc(ops, func(op kv.Op) bool { return op.Key == key && !op.Delete && string(op.Value) == value })
}

// A process of the earlier version writing meanwhile: its write of
// node-a after node-a's parts were written and before its fence is
// carried over (node-a split again, the record it dropped deleted);
// from node-a's fence on it can no longer read node-a, nor write it from
// what it read before, nor create it again; from the marker on its
// writes from a hint fail, also the create of a node new to the store.
func TestSplitFencesEarlierVersion(t *testing.T) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			kvs, w := openWhole(t, b)
			defer kvs.Close()
			hinted, err := kvs.Get(ctx, "meta/layout")
			if err != nil {
				t.Fatal(err)
			}
			hint := &kv.Cond{Key: "meta/layout", Version: hinted[0].Version, Value: []byte("2")}
			moved := string(kvbacked.MovedNodeValue)
			var stale store.Node
			var staleAt int64
			checked := map[string]bool{}
			cs := &kvbackedtest.Counting{Store: kvs}
			cs.BeforeTxn = func(_ []kv.Cond, ops []kv.Op) {
				if !writes(ops, "nodes/node-a", moved) || checked["before"] {
					return
				}
				checked["before"] = true
				n, v, err := earlierGet(ctx, kvs, "node-a")
				if err != nil {
					t.Errorf("the earlier version's read of node-a before its fence: %v", err)
					return
				}
				stale, staleAt = n, v
				n, _, err = nodeallocTake(n, podHandle("node-a", "late"))
				if err != nil {
					t.Error(err)
					return
				}
				n = nodeallocRelease(n, ipam.HandleID("net", "a1", "eth0"))
				if err := earlierWrite(ctx, kvs, n, v, hint); err != nil {
					t.Errorf("the earlier version's write of node-a before its fence: %v", err)
				}
				n.Version = ""
				w.nodes["node-a"] = n.Normalized()
			}
			cs.AfterTxn = func(ops []kv.Op, err error) {
				switch {
				case err != nil:
				case writes(ops, "nodes/node-a", moved) && !checked["fence"]:
					checked["fence"] = true
					if _, _, err := earlierGet(ctx, kvs, "node-a"); !errors.Is(err, store.ErrCorrupt) {
						t.Errorf("the earlier version's read of node-a after its fence: %v, want ErrCorrupt", err)
					}
					next, _, err := nodeallocTake(stale, podHandle("node-a", "stale"))
					if err != nil {
						t.Error(err)
						return
					}
					if err := earlierWrite(ctx, kvs, next, staleAt, nil); !errors.Is(err, store.ErrConflict) {
						t.Errorf("the earlier version's update of node-a after its fence: %v, want ErrConflict", err)
					}
					if err := earlierWrite(ctx, kvs, next, 0, nil); !errors.Is(err, store.ErrConflict) {
						t.Errorf("the earlier version's create of node-a after its fence: %v, want ErrConflict", err)
					}
				case writes(ops, "meta/layout", kvbacked.MarkerValue) && !checked["marker"]:
					checked["marker"] = true
					fresh, _, err := nodeallocTake(store.Node{Name: "node-new"}, podHandle("node-new", "n0"))
					if err == nil {
						err = earlierWrite(ctx, kvs, fresh, 0, hint)
					}
					if !errors.Is(err, store.ErrConflict) {
						t.Errorf("the earlier version's hinted create of a new node after the marker: %v, want ErrConflict", err)
					}
					if err := earlierWrite(ctx, kvs, stale, 0, nil); !errors.Is(err, store.ErrConflict) {
						t.Errorf("the earlier version's create of node-a after the marker: %v, want ErrConflict", err)
					}
				}
			}
			if err := migrate.Ensure(ctx, cs); err != nil {
				t.Fatal(err)
			}
			for _, c := range []string{"before", "fence", "marker"} {
				if !checked[c] {
					t.Errorf("no check %s ran", c)
				}
			}
			checkSplit(t, kvs, w)
		})
	}
}

// nodeallocTake gives h an address of node n's block of the small pool
// (node-new: of a block of the big pool it adds), as the earlier
// version's allocator does.
func nodeallocTake(n store.Node, h ipam.Handle) (store.Node, ipam.HandleIP, error) {
	p := wholeSmall
	if n.Name == "node-new" {
		n, p = nodealloc.AddBlock(n, wholeBig, netip.MustParsePrefix("10.20.255.0/26")), wholeBig
	}
	return nodealloc.Take(n, p, h)
}

// nodeallocRelease drops h's record from n and frees its addresses.
func nodeallocRelease(n store.Node, id string) store.Node {
	n, _ = nodealloc.Release(n, id)
	return n
}

// listHooked is a kv.Store whose first List runs before first.
type listHooked struct {
	kv.Store
	once  sync.Once
	first func()
}

func (l *listHooked) List(ctx context.Context, prefix string) ([]kv.KeyValue, error) {
	l.once.Do(l.first)
	return l.Store.List(ctx, prefix)
}

// A split that read the marker before another split finished (marked
// the store and deleted the whole keys) and the nodes after finds parts
// of nodes without whole keys: it deletes nothing, and ends on the
// split store.
func TestSplitLosesRace(t *testing.T) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			kvs, w := openWhole(t, b)
			defer kvs.Close()
			slow := &listHooked{Store: kvs, first: func() {
				if err := migrate.Ensure(t.Context(), kvs); err != nil {
					t.Error(err)
				}
			}}
			if _, err := migrate.Split(t.Context(), slow); err != nil {
				t.Fatal(err)
			}
			checkSplit(t, kvs, w)
		})
	}
}
