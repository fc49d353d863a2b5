package migrate_test

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
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked/kvbackedtest"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked/migrate"
)

// The pools of the fence tests.
var (
	migV4 = ipam.Pool{Name: "v4", CIDR: netip.MustParsePrefix("10.8.0.0/16"), BlockSize: 26, Gateway: netip.MustParseAddr("10.8.0.1")}
	migV6 = ipam.Pool{Name: "v6", CIDR: netip.MustParsePrefix("fd08::/64"), BlockSize: 122}
)

// podHandle is a pod's handle record on node, without addresses.
func podHandle(node, container string) ipam.Handle {
	return ipam.Handle{ID: ipam.HandleID("net", container, "eth0"), Network: "net", ContainerID: container, IfName: "eth0",
		Node: node, NetNS: "/var/run/netns/cni-" + container, Namespace: "default", Pod: "pod-" + container}
}

// oldAlloc is one allocation by a plugin of the earlier version.
type oldAlloc struct {
	node, container string
	ips             []ipam.HandleIP
}

func (o oldAlloc) id() string { return ipam.HandleID("net", o.container, "eth0") }

// allocOld allocates a dual-stack address pair for container on node
// through the earlier version's plugin a.
func allocOld(a firstLayoutPlugin, t *testing.T, node, container string) (oldAlloc, error) {
	got, err := a.allocate(t.Context(), podHandle(node, container), []string{migV4.Name, migV6.Name})
	return oldAlloc{node: node, container: container, ips: got.IPs}, err
}

// isFence reports whether a transaction writes a first-layout pool key.
func isFence(ops []kv.Op) bool {
	return slices.ContainsFunc(ops, func(op kv.Op) bool { return strings.HasPrefix(op.Key, "pools/") })
}

// A plugin of the earlier version on a node not yet upgraded (firstLayoutPlugin) runs while Run converts the store, in goroutines and at
// fixed points of Run: every allocation that succeeded is in the
// typed objects afterwards, every one attempted after the fence
// committed fails with errNoPool, a release before Run's
// last read (one between its read and its re-read makes it start over)
// leaves no trace in the typed objects, and the first-layout releases after the
// migration change no typed key.
func TestMigrateFencesEarlierPlugin(t *testing.T) {
	const workers, perWorker = 4, 12 // bounded: at most 48 racing allocations
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			cs := &kvbackedtest.Counting{Store: b.Open(t)}
			defer cs.Close()
			setup := firstLayoutPlugin{cs.Store}
			for _, p := range []ipam.Pool{migV4, migV6} {
				setup.createPool(t, p)
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
			release := func(a firstLayoutPlugin, id string) {
				t.Helper()
				mu.Lock()
				o := live[id]
				delete(live, id)
				released = append(released, o)
				mu.Unlock()
				if freed, err := a.release(ctx, id); err != nil || len(freed) != 2 {
					t.Errorf("the first-layout Release of %s during Run: %v, %v", id, freed, err)
				}
			}
			refused := func(what string, _ oldAlloc, err error) {
				t.Helper()
				if !errors.Is(err, errNoPool) {
					t.Errorf("the first-layout Allocate %s: %v, want errNoPool", what, err)
				}
			}
			for i := range 4 {
				succeed(allocOld(setup, t, "node-a", fmt.Sprintf("pre%d", i)))
			}

			// Fixed points: just before the fence (committed before it:
			// converted), just after it (refused; a release still works),
			// and between the consistent read and the re-read (refused; the
			// release makes Run start over).
			var fenced atomic.Bool
			var firstTries sync.WaitGroup // each worker's first allocation precedes the fence
			firstTries.Add(workers)
			var beforeFence, afterFence, inApply sync.Once
			hookAlloc := firstLayoutPlugin{cs.Store}
			cs.BeforeTxn = func(_ []kv.Cond, ops []kv.Op) {
				if isFence(ops) {
					beforeFence.Do(func() {
						firstTries.Wait()
						succeed(allocOld(hookAlloc, t, "node-h", "before-fence"))
					})
				}
				if slices.ContainsFunc(ops, func(op kv.Op) bool { return strings.HasPrefix(op.Key, "nodes/") }) {
					inApply.Do(func() {
						o, err := allocOld(hookAlloc, t, "node-h", "in-apply")
						refused("between Run's read and re-read", o, err)
						release(hookAlloc, ipam.HandleID("net", "pre1", "eth0"))
					})
				}
			}
			cs.AfterTxn = func(ops []kv.Op, err error) {
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
					a := firstLayoutPlugin{cs.Store} // a plugin process of its own
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
						case !errors.Is(err, errNoPool):
							t.Errorf("the first-layout Allocate of %s: %v, want success or ErrNoPool", o.container, err)
						}
					}
				})
			}
			close(start)
			rep, err := migrate.Run(ctx, cs)
			wg.Wait()
			if err != nil {
				t.Fatalf("Run: %v (report %+v)", err, rep)
			}
			if !fenced.Load() || rep.Fenced != 2 || rep.Pools != 2 {
				t.Fatalf("fence not seen: %+v", rep)
			}
			t.Logf("%d first-layout allocations converted, %d released during Run", len(live), len(released))

			s := kvbacked.New(cs.Store)
			typed := allocator.New(s, nil)
			for _, o := range live {
				h, ok, err := typed.Handle(ctx, o.node, o.id())
				if err != nil || !ok || !ipam.SameAddrs(h.IPs, o.ips) {
					t.Errorf("converted handle %s on %s: %v, %v, %v; want %v", o.id(), o.node, h.IPs, ok, err, o.ips)
				}
			}
			for _, o := range released {
				if h, ok, err := typed.Handle(ctx, o.node, o.id()); err != nil || ok {
					t.Errorf("handle %s released during Run is in the typed store: %v, %v", o.id(), h, err)
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

			// After the migration: the earlier version's ADD is refused, and
			// its releases leave every typed key alone.
			o, err := allocOld(setup, t, "node-a", "late")
			refused("after Run", o, err)
			o, err = allocOld(setup, t, "node-new", "late2")
			refused("after Run on a new node", o, err)
			typedKeys := func() map[string]kv.KeyValue {
				m := snapshot(t, cs.Store, "")
				maps.DeleteFunc(m, func(k string, _ kv.KeyValue) bool {
					return strings.HasPrefix(k, "blocks/") || strings.HasPrefix(k, "handles/") || strings.HasPrefix(k, "affinity/")
				})
				return m
			}
			before := typedKeys()
			for id := range live {
				if freed, err := setup.release(ctx, id); err != nil || len(freed) != 0 {
					t.Errorf("the first-layout Release of %s after Run: %v, %v; want nothing freed", id, freed, err)
				}
			}
			if after := typedKeys(); !maps.EqualFunc(before, after, func(x, y kv.KeyValue) bool { return x.Version == y.Version }) {
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
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			kvs := b.Open(t)
			defer kvs.Close()
			a := firstLayoutPlugin{kvs}
			imported := migV4
			imported.Origin = "import"
			imported.Gateway = netip.Addr{}
			a.createPool(t, imported)
			if _, err := migrate.Run(ctx, kvs); err != nil {
				t.Fatal(err)
			}
			config := migV4 // with a gateway: another definition
			config.Origin = "config"
			_, err := a.allocate(ctx, podHandle("node-a", "c1"), []string{migV4.Name}, config)
			if !errors.Is(err, errPoolConflict) {
				t.Fatalf("the previous version's ADD redefining an imported pool after the fence: %v, want refused", err)
			}
			if p := a.pool(t, migV4.Name); !p.Deleting {
				t.Fatalf("first-layout pool after the refused ADD: %+v; want marked Deleting", p)
			}
			got, err := kvbacked.New(kvs).GetPool(ctx, migV4.Name)
			if err != nil || !reflect.DeepEqual(got.Spec, imported) {
				t.Fatalf("typed pool %+v, %v; want the import's %+v", got.Spec, err, imported)
			}
		})
	}
}

// ReadLayout: unmarked before Run, typed after; a marker this version
// does not know is ErrCorrupt naming it, and Run changes nothing over it.
func TestReadLayout(t *testing.T) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			kvs, _ := openFirstLayout(t, b)
			defer kvs.Close()
			if l, err := kvbacked.ReadLayout(ctx, kvs); err != nil || l != kvbacked.LayoutUnmarked {
				t.Fatalf("before Run: %v, %v", l, err)
			}
			if _, err := migrate.Run(ctx, kvs); err != nil {
				t.Fatal(err)
			}
			if l, err := kvbacked.ReadLayout(ctx, kvs); err != nil || l != kvbacked.LayoutTyped {
				t.Fatalf("after Run: %v, %v", l, err)
			}
			if err := kvs.Txn(ctx, nil, []kv.Op{{Key: "meta/layout", Value: []byte("4")}}); err != nil {
				t.Fatal(err)
			}
			if _, err := kvbacked.ReadLayout(ctx, kvs); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), `meta/layout holds "4"`) {
				t.Fatalf("unknown marker: %v", err)
			}
			before := snapshot(t, kvs, "")
			if _, err := migrate.Run(ctx, kvs); !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("Run over an unknown marker: %v, want ErrCorrupt", err)
			}
			if after := snapshot(t, kvs, ""); !maps.EqualFunc(before, after, func(x, y kv.KeyValue) bool { return x.Version == y.Version }) {
				t.Fatal("Run over an unknown marker changed the store")
			}
		})
	}
}
