package etcdfault

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/consistency"
	"github.com/ipkeeper/ipkeeper/internal/ctl"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
	"github.com/ipkeeper/ipkeeper/internal/store/local"
)

// poolBlocks is how many blocks the removal tests claim: more than one etcd
// transaction (128 operations) can delete with their affinities.
const poolBlocks = 110

// faultStore is a real store that records the size of every transaction,
// can report smaller limits than the store's own, can run a hook before a
// transaction, and can fail one transaction without applying it (as a
// connection lost before the request left).
type faultStore struct {
	kv.Store
	limits kv.Limits
	mu     sync.Mutex
	txns   int
	// widest is the most conditions or operations one transaction carried.
	widest int
	// failAt fails the failAt-th transaction (1-based, counted from the
	// last reset); 0 never.
	failAt int
	// before runs before the n-th transaction.
	before func(n int)
}

func (f *faultStore) Limits() kv.Limits { return f.limits }

func (f *faultStore) reset(failAt int, before func(int)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.txns, f.widest, f.failAt, f.before = 0, 0, failAt, before
}

func (f *faultStore) Txn(ctx context.Context, conds []kv.Cond, ops []kv.Op) error {
	f.mu.Lock()
	f.txns++
	n, fail, before := f.txns, f.failAt == f.txns, f.before
	f.widest = max(f.widest, len(conds), len(ops))
	f.mu.Unlock()
	if before != nil {
		before(n)
	}
	if fail {
		return fmt.Errorf("%w: injected failure of transaction %d", kv.ErrUnavailable, n)
	}
	return f.Store.Txn(ctx, conds, ops)
}

// backend is a datastore the removal test runs on: how to open it from the
// test, and the datastore object the plugin and ipkeeperctl use.
type backend struct {
	name   string
	ds     config.Datastore
	open   func(t *testing.T) kv.Store
	limits func(s kv.Store) kv.Limits
}

func backends(t *testing.T, fam string) []backend {
	localDS := config.Datastore{Type: config.DatastoreLocal, Path: t.TempDir()}
	etcdDS := config.Datastore{Type: config.DatastoreEtcd, Endpoints: []string{shared.Endpoint}, Prefix: "/" + t.Name() + "/" + fam}
	return []backend{
		{name: "local", ds: localDS,
			open: func(t *testing.T) kv.Store {
				s, err := local.Open(t.Context(), localDS.Path)
				if err != nil {
					t.Fatal(err)
				}
				return s
			},
			// The local store sets no operation limit; a smaller one makes
			// the removal take several transactions there too.
			limits: func(kv.Store) kv.Limits { return kv.Limits{MaxOps: 16} }},
		{name: "etcd", ds: etcdDS,
			open: func(t *testing.T) kv.Store {
				s, err := etcd.Open(t.Context(), etcd.Config{Endpoints: etcdDS.Endpoints, Prefix: etcdDS.Prefix})
				if err != nil {
					t.Fatal(err)
				}
				return s
			},
			limits: kv.LimitsOf},
	}
}

// pluginConf is a config whose one range set is the named pool.
func pluginConf(ds config.Datastore, node, pool string) []byte {
	var d string
	if ds.Type == config.DatastoreEtcd {
		d = fmt.Sprintf(`{"type":"etcd","endpoints":[%q],"prefix":%q}`, ds.Endpoints[0], ds.Prefix)
	} else {
		d = fmt.Sprintf(`{"type":"local","path":%q}`, ds.Path)
	}
	return fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":"net1","type":"bridge",
	"ipam":{"type":"ipkeeper","nodeName":%q,"datastore":%s,"pools":[%q]}}`, node, d, pool)
}

// ipkeeperctl runs the CLI's verb against ds and returns stdout, stderr
// and the exit status.
func ipkeeperctl(t *testing.T, ds config.Datastore, args ...string) (string, string, int) {
	var global []string
	if ds.Type == config.DatastoreEtcd {
		global = []string{"--datastore", "etcd", "--etcd-endpoints", ds.Endpoints[0], "--etcd-prefix", ds.Prefix}
	} else {
		global = []string{"--datastore", "local", "--local-path", ds.Path}
	}
	var out, errb bytes.Buffer
	code := ctl.Run(t.Context(), append(global, args...), ctl.Env{Stdout: &out, Stderr: &errb,
		Getenv: func(string) string { return "" }, Hostname: func() (string, error) { return "node-ctl", nil }})
	return out.String(), errb.String(), code
}

// TestPoolRemoval removes a pool of more than 100 claimed blocks, on etcd
// (whose transactions hold at most 128 operations) and on the local store,
// IPv4 and IPv6: removal takes several transactions within the store's
// limits; one that fails midway leaves a consistent pool that hands out
// nothing, tells ADD (CNI 101) how to finish or cancel, and is finished by
// the next 'pool rm' or kept by 'pool rm --cancel'; an address allocated
// just before the removal marks the pool makes it refuse and leaves the
// pool usable.
func TestPoolRemoval(t *testing.T) {
	for _, fam := range []struct {
		name        string
		cidr, other netip.Prefix
		block       int
	}{
		{"v4", netip.MustParsePrefix("10.88.0.0/21"), netip.MustParsePrefix("10.89.0.0/24"), 29},
		{"v6", netip.MustParsePrefix("fd88::/117"), netip.MustParsePrefix("fd89::/120"), 125},
	} {
		t.Run(fam.name, func(t *testing.T) {
			for _, b := range backends(t, fam.name) {
				t.Run(b.name, func(t *testing.T) {
					pool := ipam.Pool{Name: "p", CIDR: fam.cidr, BlockSize: fam.block, Origin: "cli"}
					other := ipam.Pool{Name: "other", CIDR: fam.other, BlockSize: fam.block, Origin: "cli"}
					testPoolRemoval(t, b, pool, other)
				})
			}
		})
	}
}

func testPoolRemoval(t *testing.T, b backend, pool, other ipam.Pool) {
	ctx := t.Context()
	// withStore runs f on the store wrapped in fs; the local store is
	// closed afterwards so that plugin and CLI processes can take it.
	fs := &faultStore{}
	withStore := func(f func(a *allocator.Allocator, s kv.Store)) {
		t.Helper()
		s := b.open(t)
		defer s.Close()
		fs.Store, fs.limits = s, b.limits(s)
		f(allocator.New(fs, nil), s)
	}
	check := func(s kv.Store) consistency.Report {
		t.Helper()
		rep, err := consistency.Check(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if err := rep.Err(); err != nil {
			t.Fatal(err)
		}
		return rep
	}
	blocksOf := func(s kv.Store, name string) int {
		t.Helper()
		es, err := s.List(ctx, allocator.BlockPrefix+name+"/")
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}
	// claim makes poolBlocks empty claimed blocks (one ADD and its release
	// on as many nodes) with their affinities.
	claim := func(a *allocator.Allocator, s kv.Store) {
		t.Helper()
		for i := range poolBlocks {
			node := fmt.Sprintf("node-%03d", i)
			id := "claim-" + node
			if _, err := a.Allocate(ctx, allocator.Request{Handle: ipam.Handle{ID: id, Network: "net1", ContainerID: id, IfName: "eth0", Node: node},
				Sets: [][]string{{pool.Name}}}); err != nil {
				t.Fatalf("allocate on %s: %v", node, err)
			}
			if _, err := a.Release(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		if n := blocksOf(s, pool.Name); n < poolBlocks {
			t.Fatalf("%d blocks claimed, want %d or more", n, poolBlocks)
		}
	}
	add := func(node, container string) outcome {
		t.Helper()
		o, err := runPlugin(ctx, t, "ADD", container, pluginConf(b.ds, node, pool.Name), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return o
	}

	withStore(func(a *allocator.Allocator, s kv.Store) {
		for _, p := range []ipam.Pool{pool, other} {
			if err := a.CreatePool(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := a.Allocate(ctx, allocator.Request{Handle: ipam.Handle{ID: "keep", Network: "net1", ContainerID: "keep", IfName: "eth0", Node: "node-x"},
			Sets: [][]string{{other.Name}}}); err != nil {
			t.Fatal(err)
		}
		claim(a, s)

		// 1. A removal whose third transaction fails: the mark and one
		// batch applied.
		fs.reset(3, nil)
		err := a.DeletePool(ctx, pool.Name)
		if !errors.Is(err, kv.ErrUnavailable) {
			t.Fatalf("DeletePool with a failing batch: %v, want the injected failure", err)
		}
		got, err := a.Pool(ctx, pool.Name)
		if err != nil || !got.Deleting {
			t.Fatalf("after a failed removal: pool %+v, %v; want it there, marked Deleting", got, err)
		}
		if n := blocksOf(s, pool.Name); n == 0 || n == poolBlocks {
			t.Fatalf("after a removal that failed midway %d of %d blocks are left, want some", n, poolBlocks)
		}
		check(s)
	})

	// 2. Meanwhile ADD fails with 101 saying how to finish or cancel.
	o := add("node-new", "c-during")
	for _, want := range []string{"being removed", "ipkeeperctl pool rm p", "ipkeeperctl pool rm --cancel p"} {
		if o.Code != 101 || !strings.Contains(o.Msg, want) {
			t.Fatalf("ADD from a pool being removed: code %d %q, want 101 mentioning %q", o.Code, o.Msg, want)
		}
	}

	// 3. pool rm --cancel keeps it: ADD works again.
	if out, errs, code := ipkeeperctl(t, b.ds, "pool", "rm", "--cancel", pool.Name); code != 0 || !strings.Contains(out, "removal is cancelled") {
		t.Fatalf("pool rm --cancel: exit %d\n%s%s", code, out, errs)
	}
	if o := add("node-new", "c-kept"); o.Code != 0 || len(o.IPs) != 1 || !pool.CIDR.Contains(o.IPs[0]) {
		t.Fatalf("ADD after the removal was cancelled: %+v", o)
	}
	if o, err := runPlugin(ctx, t, "DEL", "c-kept", pluginConf(b.ds, "node-new", pool.Name), t.TempDir()); err != nil || o.Code != 0 {
		t.Fatalf("DEL: %v %+v", err, o)
	}

	// 4. An address allocated after pool rm found none in use but before
	// it marked the pool: the removal refuses and the pool stays usable.
	withStore(func(a *allocator.Allocator, s kv.Store) {
		plain := allocator.New(s, nil)
		fs.reset(0, func(n int) {
			if n != 1 {
				return
			}
			if _, err := plain.Allocate(ctx, allocator.Request{Handle: ipam.Handle{ID: "racer", Network: "net1", ContainerID: "racer", IfName: "eth0", Node: "node-r"},
				Sets: [][]string{{pool.Name}}}); err != nil {
				t.Errorf("racing allocation: %v", err)
			}
		})
		err := a.DeletePool(ctx, pool.Name)
		if !errors.Is(err, allocator.ErrPoolInUse) || !strings.Contains(err.Error(), "stays usable") {
			t.Fatalf("DeletePool racing an allocation: %v, want ErrPoolInUse", err)
		}
		if got, err := a.Pool(ctx, pool.Name); err != nil || got.Deleting {
			t.Fatalf("after a refused removal: %+v, %v; want the pool usable", got, err)
		}
		if _, err := plain.Release(ctx, "racer"); err != nil {
			t.Fatal(err)
		}
		check(s)

		// 5. Claim the blocks again, interrupt another removal at its
		// first batch: the pool is marked, every block still there.
		claim(a, s)
		fs.reset(2, nil)
		if err := a.DeletePool(ctx, pool.Name); !errors.Is(err, kv.ErrUnavailable) {
			t.Fatalf("DeletePool with a failing batch: %v", err)
		}
	})

	// 6. The next pool rm finishes it.
	if out, errs, code := ipkeeperctl(t, b.ds, "pool", "rm", pool.Name); code != 0 || !strings.Contains(out, "removed") {
		t.Fatalf("pool rm after an interrupted removal: exit %d\n%s%s", code, out, errs)
	}
	withStore(func(a *allocator.Allocator, s kv.Store) {
		if _, err := a.Pool(ctx, pool.Name); !errors.Is(err, allocator.ErrPoolNotFound) {
			t.Fatalf("pool after pool rm: %v", err)
		}
		if n := blocksOf(s, pool.Name); n != 0 {
			t.Fatalf("%d blocks left", n)
		}
		aff, err := s.List(ctx, allocator.AffinityPrefix)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range aff {
			if strings.Contains(e.Key, "/"+pool.Name+"/") {
				t.Fatalf("affinity left: %s", e.Key)
			}
		}
		if rep := check(s); rep.Counts.Pools != 1 || rep.Counts.Handles != 1 || rep.Counts.Allocated != 1 {
			t.Fatalf("the other pool was touched: %+v", rep.Counts)
		}

		// 7. An uninterrupted removal of as many blocks succeeds in
		// transactions within the store's limits.
		if err := a.CreatePool(ctx, pool); err != nil {
			t.Fatal(err)
		}
		claim(a, s)
		fs.reset(0, nil)
		if err := a.DeletePool(ctx, pool.Name); err != nil {
			t.Fatalf("DeletePool of %d empty blocks: %v", poolBlocks, err)
		}
		lim := fs.limits
		if fs.txns < 3 || lim.MaxOps > 0 && fs.widest > lim.MaxOps {
			t.Fatalf("removal took %d transactions of up to %d conditions or operations, limit %d", fs.txns, fs.widest, lim.MaxOps)
		}
		t.Logf("%d blocks removed in %d transactions of at most %d operations (limit %d)", poolBlocks, fs.txns, fs.widest, lim.MaxOps)
		if n := blocksOf(s, pool.Name); n != 0 {
			t.Fatalf("%d blocks left", n)
		}
		check(s)
	})
}
