package etcdfault

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/consistency"
	"github.com/ipkeeper/ipkeeper/internal/ctl"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	_ "github.com/ipkeeper/ipkeeper/internal/datastore/kubeopen" // the kubernetes datastore for datastore.Open and ipkeeperctl
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// poolBlocks is how many blocks the removal tests claim: more than one etcd
// transaction (128 operations) could delete with their claims, were they
// deleted together.
const poolBlocks = 110

// backend is a datastore the removal test runs on: ds is what the test
// (datastore.Open) and ipkeeperctl open, pluginDS what the plugin's
// config names — the same but for the kubernetes datastore, where
// ipkeeperctl authenticates as the controller's ServiceAccount and the
// plugin as node-new's (a token bound to a pod on node-new), with the RBAC
// and node-writes policy deploy/ ships.
type backend struct {
	name         string
	ds, pluginDS config.Datastore
}

// backendNames are the datastores of TestPoolRemoval.
var backendNames = []string{"local", "etcd", "kubernetes"}

// backends counts the backends newBackend made in this process.
var backends int

// newBackend makes a fresh, empty datastore of the named kind for t; fam
// tells the partitions of the shared etcd and API server apart. The
// kubernetes one skips t without a kube-apiserver binary (fails it under
// CI=true).
func newBackend(t *testing.T, name, fam string) backend {
	// The etcd and the API server outlive a test run (go test -count):
	// each backend gets a partition of its own.
	backends++
	run := strconv.Itoa(backends)
	var ds config.Datastore
	switch name {
	case "local":
		ds = config.Datastore{Type: config.DatastoreLocal, Path: t.TempDir()}
	case "etcd":
		ds = config.Datastore{Type: config.DatastoreEtcd, Endpoints: []string{shared.Endpoint}, Prefix: "/" + t.Name() + "/" + fam + "/" + run}
	case "kubernetes":
		srv := kubeServer(t)
		ds = config.Datastore{Type: config.DatastoreKubernetes, Prefix: "prm-" + fam + "-" + run,
			Kubeconfig:  srv.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-controller"),
			DialTimeout: config.DefaultDialTimeout, RequestTimeout: config.DefaultRequestTimeout}
		node := ds // the plugin runs on node-new only
		node.Kubeconfig = srv.NodeKubeconfig(t, "node-new")
		return backend{name: name, ds: ds, pluginDS: node}
	default:
		t.Fatalf("no backend %q", name)
	}
	return backend{name: name, ds: ds, pluginDS: ds}
}

// pluginConf is a config whose one range set is the named pool.
func pluginConf(ds config.Datastore, node, pool string) []byte {
	var d string
	switch ds.Type {
	case config.DatastoreEtcd:
		d = fmt.Sprintf(`{"type":"etcd","endpoints":[%q],"prefix":%q}`, ds.Endpoints[0], ds.Prefix)
	case config.DatastoreKubernetes:
		d = fmt.Sprintf(`{"type":"kubernetes","kubeconfig":%q,"prefix":%q}`, ds.Kubeconfig, ds.Prefix)
	default:
		d = fmt.Sprintf(`{"type":"local","path":%q}`, ds.Path)
	}
	return fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":"net1","type":"bridge",
	"ipam":{"type":"ipkeeper","nodeName":%q,"datastore":%s,"pools":[%q]}}`, node, d, pool)
}

// ipkeeperctl runs the CLI's verb against ds and returns stdout, stderr
// and the exit status.
func ipkeeperctl(t *testing.T, ds config.Datastore, args ...string) (string, string, int) {
	var global []string
	switch ds.Type {
	case config.DatastoreEtcd:
		global = []string{"--datastore", "etcd", "--etcd-endpoints", ds.Endpoints[0], "--etcd-prefix", ds.Prefix}
	case config.DatastoreKubernetes:
		global = []string{"--datastore", "kubernetes", "--datastore-kubeconfig", ds.Kubeconfig, "--datastore-prefix", ds.Prefix}
	default:
		global = []string{"--datastore", "local", "--local-path", ds.Path}
	}
	var out, errb bytes.Buffer
	code := ctl.Run(t.Context(), append(global, args...), ctl.Env{Stdout: &out, Stderr: &errb,
		Getenv: func(string) string { return "" }, Hostname: func() (string, error) { return "node-ctl", nil }})
	return out.String(), errb.String(), code
}

// TestPoolRemoval removes a pool of more than 100 claimed blocks, on the
// local store, etcd and the kubernetes datastore (a real kube-apiserver
// with deploy/'s CRDs and RBAC), IPv4 and IPv6: removal writes one object
// at a time; one that fails midway — between two blocks, or between a block
// taken out of its node's object and its claim's deletion — leaves a pool
// that hands out nothing, that check reports as being removed (and
// nothing else but the claim left behind), tells ADD (CNI 101) how to
// finish or cancel, and is finished by the next 'pool rm' or kept by
// 'pool rm --cancel'; an address allocated just before the removal marks
// the pool makes it refuse and leaves the pool usable.
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
			for _, name := range backendNames {
				t.Run(name, func(t *testing.T) {
					b := newBackend(t, name, fam.name)
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
	// withStore runs f on the typed store wrapped in fs, opened as
	// ipkeeperctl opens it; it is closed afterwards so that plugin and CLI
	// processes can take the local store's file.
	fs := &faultStore{}
	withStore := func(f func(a *allocator.Allocator, s store.Store)) {
		t.Helper()
		s, err := datastore.Open(ctx, b.ds, datastore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		fs.Store = s
		fs.reset(0, nil)
		f(allocator.New(fs, nil), s)
	}
	// check runs the checker and fails on any problem but those of the
	// kinds in expect, each of which must be reported for pool p.
	check := func(s store.Store, expect ...consistency.Kind) consistency.Report {
		t.Helper()
		rep, err := consistency.CheckStore(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		var rest []consistency.Problem
		seen := map[consistency.Kind]bool{}
		for _, p := range rep.Problems {
			if slices.Contains(expect, p.Kind) && p.Pool == pool.Name {
				seen[p.Kind] = true
				continue
			}
			rest = append(rest, p)
		}
		if err := (consistency.Report{Problems: rest}).Err(); err != nil {
			t.Fatal(err)
		}
		for _, k := range expect {
			if !seen[k] {
				t.Fatalf("check does not report %s for pool %s: %+v", k, pool.Name, rep.Problems)
			}
		}
		return rep
	}
	// blocksOf counts the pool's claimed blocks and the node objects'
	// blocks of the pool.
	blocksOf := func(s store.Store, name string) (claims, held int) {
		t.Helper()
		cs, err := s.ListClaims(ctx, store.ClaimSelector{Pool: name})
		if err != nil {
			t.Fatal(err)
		}
		ns, err := s.ListNodes(ctx, store.NodeSelector{})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range ns {
			for _, blk := range n.Blocks {
				if blk.Pool == name {
					held++
				}
			}
		}
		return len(cs), held
	}
	// claim makes poolBlocks empty claimed blocks (one ADD and its release
	// on as many nodes).
	claim := func(a *allocator.Allocator, s store.Store) {
		t.Helper()
		for i := range poolBlocks {
			node := fmt.Sprintf("node-%03d", i)
			id := "claim-" + node
			if _, err := a.Allocate(ctx, allocator.Request{Handle: ipam.Handle{ID: id, Network: "net1", ContainerID: id, IfName: "eth0", Node: node},
				Sets: [][]string{{pool.Name}}}); err != nil {
				t.Fatalf("allocate on %s: %v", node, err)
			}
			if _, err := a.Release(ctx, node, id); err != nil {
				t.Fatal(err)
			}
		}
		if c, h := blocksOf(s, pool.Name); c < poolBlocks || h != c {
			t.Fatalf("%d blocks claimed, %d held by their nodes; want %d or more, all held", c, h, poolBlocks)
		}
	}
	add := func(node, container string) outcome {
		t.Helper()
		o, err := runPlugin(ctx, t, "ADD", container, pluginConf(b.pluginDS, node, pool.Name), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return o
	}

	withStore(func(a *allocator.Allocator, s store.Store) {
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

		// 1. A removal whose fourth write fails: the mark, one block out
		// of its node's object and its claim deleted, the next block's
		// node write lost.
		fs.reset(4, nil)
		err := a.DeletePool(ctx, pool.Name)
		if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "injected failure of write 4") {
			t.Fatalf("DeletePool with a failing write: %v, want the injected failure", err)
		}
		got, err := a.Pool(ctx, pool.Name)
		if err != nil || !got.Deleting {
			t.Fatalf("after a failed removal: pool %+v, %v; want it there, marked Deleting", got, err)
		}
		if c, h := blocksOf(s, pool.Name); c != poolBlocks-1 || h != c {
			t.Fatalf("after a removal that failed at its second block: %d claims, %d held blocks left, want %d of each", c, h, poolBlocks-1)
		}
		check(s, consistency.KindPoolDeleting)
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
	if o, err := runPlugin(ctx, t, "DEL", "c-kept", pluginConf(b.pluginDS, "node-new", pool.Name), t.TempDir()); err != nil || o.Code != 0 {
		t.Fatalf("DEL: %v %+v", err, o)
	}

	// 4. An address allocated after pool rm found none in use but before
	// it marked the pool: the removal refuses and the pool stays usable.
	withStore(func(a *allocator.Allocator, s store.Store) {
		check(s)
		plain := allocator.New(s, nil)
		raced := false
		fs.reset(0, func(n int) {
			if n != 1 {
				return
			}
			raced = true
			if _, err := plain.Allocate(ctx, allocator.Request{Handle: ipam.Handle{ID: "racer", Network: "net1", ContainerID: "racer", IfName: "eth0", Node: "node-r"},
				Sets: [][]string{{pool.Name}}}); err != nil {
				t.Errorf("racing allocation: %v", err)
			}
		})
		err := a.DeletePool(ctx, pool.Name)
		if !raced {
			t.Fatal("the removal wrote nothing: the racing allocation did not run")
		}
		if !errors.Is(err, allocator.ErrPoolInUse) || !strings.Contains(err.Error(), "stays usable") {
			t.Fatalf("DeletePool racing an allocation: %v, want ErrPoolInUse", err)
		}
		if got, err := a.Pool(ctx, pool.Name); err != nil || got.Deleting {
			t.Fatalf("after a refused removal: %+v, %v; want the pool usable", got, err)
		}
		if _, err := plain.Release(ctx, "node-r", "racer"); err != nil {
			t.Fatal(err)
		}
		check(s)

		// 5. Claim the blocks again, interrupt another removal between
		// its first block's node write and its claim's deletion: the pool
		// is marked, and the claim whose node no longer holds the block
		// is reported with it.
		claim(a, s)
		fs.reset(3, nil)
		if err := a.DeletePool(ctx, pool.Name); !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("DeletePool with a failing write: %v", err)
		}
		if b.ds.Type == config.DatastoreKubernetes {
			// A block's claim and state are one IPAMBlock there:
			// the failed write leaves both, never one without the
			// other.
			if c, h := blocksOf(s, pool.Name); c < poolBlocks || h != c {
				t.Fatalf("after a removal whose write failed: %d claims, %d held blocks; want %d or more, all held", c, h, poolBlocks)
			}
			check(s, consistency.KindPoolDeleting)
		} else {
			if c, h := blocksOf(s, pool.Name); c < poolBlocks || h != c-1 {
				t.Fatalf("after a removal that failed deleting its first claim: %d claims, %d held blocks; want %d or more, one less held", c, h, poolBlocks)
			}
			check(s, consistency.KindPoolDeleting, consistency.KindClaimWithoutBlock)
		}
	})

	// 6. The next pool rm finishes it.
	if out, errs, code := ipkeeperctl(t, b.ds, "pool", "rm", pool.Name); code != 0 || !strings.Contains(out, "removed") {
		t.Fatalf("pool rm after an interrupted removal: exit %d\n%s%s", code, out, errs)
	}
	withStore(func(a *allocator.Allocator, s store.Store) {
		if _, err := a.Pool(ctx, pool.Name); !errors.Is(err, allocator.ErrPoolNotFound) {
			t.Fatalf("pool after pool rm: %v", err)
		}
		if c, h := blocksOf(s, pool.Name); c != 0 || h != 0 {
			t.Fatalf("%d claims and %d node objects' blocks of the removed pool left", c, h)
		}
		if rep := check(s); rep.Counts.Pools != 1 || rep.Counts.Handles != 1 || rep.Counts.Allocated != 1 {
			t.Fatalf("the other pool was touched: %+v", rep.Counts)
		}

		// 7. An uninterrupted removal of as many blocks succeeds, one
		// object written at a time: at least one write per block.
		if err := a.CreatePool(ctx, pool); err != nil {
			t.Fatal(err)
		}
		claim(a, s)
		fs.reset(0, nil)
		if err := a.DeletePool(ctx, pool.Name); err != nil {
			t.Fatalf("DeletePool of %d empty blocks: %v", poolBlocks, err)
		}
		if w := fs.writeCount(); w < poolBlocks+2 {
			t.Fatalf("removal of %d blocks took %d writes, want one per block besides the pool's", poolBlocks, w)
		}
		t.Logf("%d blocks removed in %d writes of one object each", poolBlocks, fs.writeCount())
		if c, h := blocksOf(s, pool.Name); c != 0 || h != 0 {
			t.Fatalf("%d claims and %d held blocks left", c, h)
		}
		check(s)
	})
}
