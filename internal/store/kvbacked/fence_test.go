package kvbacked_test

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked/firstlayout"
)

// oldAlloc is one allocation by the first-layout allocator (a plugin of the
// earlier version).
type oldAlloc struct {
	node, container string
	ips             []ipam.HandleIP
}

func (o oldAlloc) id() string { return ipam.HandleID("net", o.container, "eth0") }

// allocOld allocates a dual-stack address pair for container on node
// through the first-layout allocator a.
func allocOld(a *firstlayout.Allocator, t *testing.T, node, container string) (oldAlloc, error) {
	h := benchHandle(node, container)
	h.Network, h.ID = "net", ipam.HandleID("net", container, "eth0")
	got, err := a.Allocate(t.Context(), firstlayout.Request{Handle: h, Sets: [][]string{{migV4.Name}, {migV6.Name}}})
	return oldAlloc{node: node, container: container, ips: got.IPs}, err
}

// isFence reports whether a transaction writes a first-layout pool key.
func isFence(ops []kv.Op) bool {
	return slices.ContainsFunc(ops, func(op kv.Op) bool { return strings.HasPrefix(op.Key, "pools/") })
}

// Today's allocator (a plugin of the earlier version on a node not yet
// upgraded) runs while Migrate converts the store, in goroutines and at
// fixed points of Migrate: every allocation that succeeded is in the
// typed objects afterwards, every one attempted after the fence
// committed fails with allocator.ErrNoPool, a release before Migrate's
// last read (one between its read and its re-read makes it start over)
// leaves no trace in the typed objects, and the first-layout releases after the
// migration change no typed key.
func TestMigrateFencesTodaysAllocator(t *testing.T) {
	const workers, perWorker = 4, 12 // bounded: at most 48 racing allocations
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			cs := &counting{Store: b.open(t)}
			defer cs.Close()
			setup := newAllocator(t, cs.Store)
			for _, p := range []ipam.Pool{migV4, migV6} {
				if _, err := setup.EnsurePool(ctx, p); err != nil {
					t.Fatal(err)
				}
			}
			var (
				mu       sync.Mutex
				live     = map[string]oldAlloc{} // succeeded, not released
				released []oldAlloc
			)
			succeed := func(o oldAlloc, err error) {
				t.Helper()
				if err != nil {
					t.Errorf("the first-layout Allocate of %s before the fence: %v", o.container, err)
					return
				}
				mu.Lock()
				live[o.id()] = o
				mu.Unlock()
			}
			release := func(a *firstlayout.Allocator, id string) {
				t.Helper()
				mu.Lock()
				o := live[id]
				delete(live, id)
				released = append(released, o)
				mu.Unlock()
				if freed, err := a.Release(ctx, id); err != nil || len(freed) != 2 {
					t.Errorf("the first-layout Release of %s during Migrate: %v, %v", id, freed, err)
				}
			}
			refused := func(what string, _ oldAlloc, err error) {
				t.Helper()
				if !errors.Is(err, allocator.ErrNoPool) {
					t.Errorf("the first-layout Allocate %s: %v, want ErrNoPool", what, err)
				}
			}
			for i := range 4 {
				succeed(allocOld(setup, t, "node-a", fmt.Sprintf("pre%d", i)))
			}

			// Fixed points: just before the fence (committed before it:
			// converted), just after it (refused; a release still works),
			// and between the consistent read and the re-read (refused; the
			// release makes Migrate start over).
			var fenced atomic.Bool
			var firstTries sync.WaitGroup // each worker's first allocation precedes the fence
			firstTries.Add(workers)
			var beforeFence, afterFence, inApply sync.Once
			hookAlloc := newAllocator(t, cs.Store)
			cs.beforeTxn = func(_ []kv.Cond, ops []kv.Op) {
				if isFence(ops) {
					beforeFence.Do(func() {
						firstTries.Wait()
						succeed(allocOld(hookAlloc, t, "node-h", "before-fence"))
					})
				}
				if slices.ContainsFunc(ops, func(op kv.Op) bool { return strings.HasPrefix(op.Key, "nodes/") }) {
					inApply.Do(func() {
						o, err := allocOld(hookAlloc, t, "node-h", "in-apply")
						refused("between Migrate's read and re-read", o, err)
						release(hookAlloc, ipam.HandleID("net", "pre1", "eth0"))
					})
				}
			}
			cs.afterTxn = func(ops []kv.Op, err error) {
				if err == nil && isFence(ops) {
					fenced.Store(true)
					afterFence.Do(func() {
						o, err := allocOld(hookAlloc, t, "node-h", "after-fence")
						refused("just after the fence", o, err)
						release(hookAlloc, ipam.HandleID("net", "pre0", "eth0"))
					})
				}
			}

			var wg sync.WaitGroup
			start := make(chan struct{})
			for w := range workers {
				wg.Go(func() {
					a := newAllocator(t, cs.Store) // a plugin process of its own
					<-start
					for i := range perWorker {
						after := fenced.Load()
						o, err := allocOld(a, t, fmt.Sprintf("node-%d", w), fmt.Sprintf("w%d-%d", w, i))
						if i == 0 {
							firstTries.Done()
						}
						switch {
						case err == nil && after:
							t.Errorf("the first-layout Allocate of %s succeeded after the fence: %v", o.container, o.ips)
						case err == nil:
							succeed(o, nil)
						case !errors.Is(err, allocator.ErrNoPool):
							t.Errorf("the first-layout Allocate of %s: %v, want success or ErrNoPool", o.container, err)
						}
					}
				})
			}
			close(start)
			rep, err := kvbacked.Migrate(ctx, cs)
			wg.Wait()
			if err != nil {
				t.Fatalf("Migrate: %v (report %+v)", err, rep)
			}
			if !fenced.Load() || rep.Fenced != 2 || rep.Pools != 2 {
				t.Fatalf("fence not seen: %+v", rep)
			}
			t.Logf("%d first-layout allocations converted, %d released during Migrate", len(live), len(released))

			s := kvbacked.New(cs.Store)
			v2 := allocator.NewStoreAllocator(s, nil)
			for _, o := range live {
				h, ok, err := v2.Handle(ctx, o.node, o.id())
				if err != nil || !ok || !sameAddrs(h.IPs, o.ips) {
					t.Errorf("converted handle %s on %s: %v, %v, %v; want %v", o.id(), o.node, h.IPs, ok, err, o.ips)
				}
			}
			for _, o := range released {
				if h, ok, err := v2.Handle(ctx, o.node, o.id()); err != nil || ok {
					t.Errorf("handle %s released during Migrate is in the typed store: %v, %v", o.id(), h, err)
				}
			}
			nodes, err := s.ListNodes(ctx, store.NodeSelector{})
			if err != nil {
				t.Fatal(err)
			}
			records := 0
			for _, n := range nodes {
				records += len(n.Handles)
			}
			if records != len(live) {
				t.Errorf("%d handle records in the typed store, %d live first-layout allocations", records, len(live))
			}

			// After the migration: the first-layout allocator (with its hints) is
			// refused, and its releases leave every typed key alone.
			o, err := allocOld(setup, t, "node-a", "late")
			refused("after Migrate", o, err)
			o, err = allocOld(setup, t, "node-new", "late2")
			refused("after Migrate on a new node", o, err)
			typed := func() map[string]kv.KeyValue {
				m := snapshot(t, cs.Store, "")
				maps.DeleteFunc(m, func(k string, _ kv.KeyValue) bool {
					return strings.HasPrefix(k, "blocks/") || strings.HasPrefix(k, "handles/") || strings.HasPrefix(k, "affinity/")
				})
				return m
			}
			before := typed()
			for id := range live {
				if freed, err := setup.Release(ctx, id); err != nil || len(freed) != 0 {
					t.Errorf("the first-layout Release of %s after Migrate: %v, %v; want nothing freed", id, freed, err)
				}
			}
			if after := typed(); !maps.EqualFunc(before, after, func(x, y kv.KeyValue) bool { return x.Version == y.Version }) {
				t.Error("the first-layout releases after the migration changed typed keys")
			}
		})
	}
}

// A first-layout pool an import created, which the first-layout allocator lets a
// config redefine (clearing the mark with the new definition), stays
// fenced: an ADD of the previous version's plugin whose config defines it otherwise is
// refused, and the key stays marked; the typed copy keeps the import's
// definition as it was.
func TestMigrateFencesImportedPool(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			kvs := b.open(t)
			defer kvs.Close()
			a := newAllocator(t, kvs)
			imported := migV4
			imported.Origin = "import"
			imported.Gateway = netip.Addr{}
			if err := a.CreatePool(ctx, imported); err != nil {
				t.Fatal(err)
			}
			if _, err := kvbacked.Migrate(ctx, kvs); err != nil {
				t.Fatal(err)
			}
			config := migV4 // with a gateway: another definition
			config.Origin = "config"
			h := benchHandle("node-a", "c1")
			_, err := a.Allocate(ctx, firstlayout.Request{Handle: h, Sets: [][]string{{migV4.Name}}, Define: []ipam.Pool{config}})
			if err == nil {
				t.Fatal("the previous version's ADD redefining an imported pool succeeded after the fence")
			}
			if p, err := a.Pool(ctx, migV4.Name); err != nil || !p.Deleting {
				t.Fatalf("first-layout pool after the refused ADD: %+v, %v; want marked Deleting", p, err)
			}
			got, err := kvbacked.New(kvs).GetPool(ctx, migV4.Name)
			if err != nil || !reflect.DeepEqual(got.Spec, imported) {
				t.Fatalf("typed pool %+v, %v; want the import's %+v", got.Spec, err, imported)
			}
		})
	}
}

// ReadLayout: unmarked before Migrate, typed after; a marker this version
// does not know is ErrCorrupt naming it, and Migrate changes nothing over
// it.
func TestReadLayout(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			kvs := b.open(t)
			defer kvs.Close()
			writeFirstLayout(t, kvs)
			if l, err := kvbacked.ReadLayout(ctx, kvs); err != nil || l != kvbacked.LayoutUnmarked {
				t.Fatalf("before Migrate: %v, %v", l, err)
			}
			if _, err := kvbacked.Migrate(ctx, kvs); err != nil {
				t.Fatal(err)
			}
			if l, err := kvbacked.ReadLayout(ctx, kvs); err != nil || l != kvbacked.LayoutTyped {
				t.Fatalf("after Migrate: %v, %v", l, err)
			}
			if err := kvs.Txn(ctx, nil, []kv.Op{{Key: "meta/layout", Value: []byte("3")}}); err != nil {
				t.Fatal(err)
			}
			if _, err := kvbacked.ReadLayout(ctx, kvs); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), `meta/layout holds "3"`) {
				t.Fatalf("unknown marker: %v", err)
			}
			before := snapshot(t, kvs, "")
			if _, err := kvbacked.Migrate(ctx, kvs); !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("Migrate over an unknown marker: %v, want ErrCorrupt", err)
			}
			if after := snapshot(t, kvs, ""); !maps.EqualFunc(before, after, func(x, y kv.KeyValue) bool { return x.Version == y.Version }) {
				t.Fatal("Migrate over an unknown marker changed the store")
			}
		})
	}
}
