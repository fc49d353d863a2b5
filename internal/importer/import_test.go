package importer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/importer"
	"github.com/ipkeeper/ipkeeper/internal/importer/calico"
	"github.com/ipkeeper/ipkeeper/internal/importer/whereabouts"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/netpools"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/testenv"
)

func calicoPlan(t *testing.T) *importer.Plan {
	t.Helper()
	data, err := os.ReadFile("testdata/calico-block-100.112.209.128-26.json")
	if err != nil {
		t.Fatal(err)
	}
	kvs, err := calico.ParseFile(data)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := calico.Plan(kvs, calico.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

func whereaboutsPlan(t *testing.T) *importer.Plan {
	t.Helper()
	var files [][]byte
	for _, f := range []string{"testdata/whereabouts-ippools.yaml", "testdata/network-attachment-definition.yaml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, b)
	}
	plan, err := whereabouts.Plan(files, whereabouts.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

func statuses(r importer.Result) map[string]int {
	out := map[string]int{}
	for _, c := range r.Changes {
		out[c.Kind+" "+c.Status]++
	}
	return out
}

// TestCalicoImportThenAllocate imports the real Calico block: exactly its
// 9 addresses are taken, a second run writes nothing, allocating the pool
// dry hands out every other usable address, never an imported one, in
// Calico's free order, and releasing an imported handle (DEL) frees its
// address for the next allocation.
func TestCalicoImportThenAllocate(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		plan := calicoPlan(t)
		res, err := e.apply(ctx, plan, false)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]int{"pool created": 1, "block created": 1, "handle created": 9}
		if got := statuses(res); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("changes %v, want %v", got, want)
		}
		if len(res.Addresses) != 9 {
			t.Fatalf("%d addresses imported, want 9", len(res.Addresses))
		}
		e.check(t)

		before := e.dump(t)
		res, err = e.apply(ctx, calicoPlan(t), false)
		if err != nil {
			t.Fatal(err)
		}
		if got := statuses(res); fmt.Sprint(got) != fmt.Sprint(map[string]int{"pool present": 1, "block present": 1, "handle present": 9}) {
			t.Fatalf("second run: %v", got)
		}
		if e.dump(t) != before {
			t.Fatal("second run wrote to the store")
		}

		pool := plan.Pools[0]
		const node = "ip-10-200-205-203"
		imported := plan.Addresses()
		req := func(i int) allocator.Request {
			return allocator.Request{Handle: ipam.Handle{ID: fmt.Sprintf("net.c%d.eth0", i), Node: node}, Sets: [][]string{{pool.Name}}}
		}
		var got []netip.Addr
		for i := 0; ; i++ {
			if i > 64 {
				// The pool is one /26: stop instead of looping until the
				// test times out.
				t.Fatalf("%d allocations from a /26 and it is not exhausted", i)
			}
			h, err := e.allocate(ctx, req(i))
			if errors.Is(err, allocator.ErrExhausted) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, h.IPs[0].Addr)
		}
		for _, g := range got {
			if slices.Contains(imported, g) {
				t.Errorf("allocation handed out imported address %s", g)
			}
		}
		// 62 usable (network and broadcast of the /26 excluded) less the 8
		// imported usable ones (.128 is the network address).
		if len(got) != 54 {
			t.Errorf("allocated %d addresses before exhaustion, want 54", len(got))
		}
		if got[0] != netip.MustParseAddr("100.112.209.173") {
			t.Errorf("first allocation %s, want 100.112.209.173 (Calico's first unallocated ordinal, 45)", got[0])
		}
		e.check(t)

		// DEL of an imported pod frees its address, and only then is it
		// handed out again.
		const id = "k8s-pod-network.820a2747f282dc6cce92d5d544ea8e778a7fa787e219cc1c9757a58aa7a08455.eth0"
		freed, err := e.release(ctx, node, id)
		if err != nil || len(freed) != 1 || freed[0] != netip.MustParseAddr("100.112.209.150") {
			t.Fatalf("release of imported %s: %v, %v; want 100.112.209.150", id, freed, err)
		}
		h, err := e.allocate(ctx, req(100))
		if err != nil || h.IPs[0].Addr != freed[0] {
			t.Fatalf("allocation after releasing an imported handle: %+v, %v; want %s", h, err, freed[0])
		}
		e.check(t)
	})
}

// TestWhereaboutsImportThenAllocate imports the real whereabouts pool; the
// NetworkAttachmentDefinition's config then adopts the pool, finds it
// exhausted (the production leak), and gets the address of a released
// stale allocation.
func TestWhereaboutsImportThenAllocate(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		plan := whereaboutsPlan(t)
		if _, err := e.apply(ctx, plan, false); err != nil {
			t.Fatal(err)
		}
		e.check(t)
		conf, err := config.Parse([]byte(`{"cniVersion":"0.3.1","name":"test","type":"ipvlan","ipam":{"type":"ipkeeper","datastore":{"type":"local"},
		"range":"172.18.178.192/27","range_start":"172.18.178.196","range_end":"172.18.178.200"}}`))
		if err != nil {
			t.Fatal(err)
		}
		sets, err := netpools.Planned(conf)
		if err != nil {
			t.Fatal(err)
		}
		define := netpools.Definitions(sets)
		if p := sets[0][0]; p.Name != plan.Pools[0].Name || p.RangeStart.String() != "172.18.178.196" {
			t.Fatalf("resolved pool %+v", p)
		}
		req := func(id string) allocator.Request {
			return allocator.Request{Handle: ipam.Handle{ID: id, Node: "n1"}, Sets: [][]string{sets[0].Names()}, Define: define}
		}
		if _, err := e.allocate(ctx, req("test.new1.net1")); !errors.Is(err, allocator.ErrExhausted) {
			t.Fatalf("allocate in the full imported pool: %v, want ErrExhausted (the config adopts the imported pool)", err)
		}
		// whereabouts has no nodes: its allocations are the unaffine object's.
		stale := "test.7213d4c5b6a7988a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f07a7a16b0f67.net1"
		if freed, err := e.release(ctx, store.UnaffineNode, stale); err != nil || len(freed) != 1 || freed[0].String() != "172.18.178.199" {
			t.Fatalf("release %s: %v, %v", stale, freed, err)
		}
		h, err := e.allocate(ctx, req("test.new1.net1"))
		if err != nil || h.IPs[0].Addr.String() != "172.18.178.199" {
			t.Fatalf("allocate after release: %+v, %v", h, err)
		}
		e.check(t)
	})
}

func TestDryRunWritesNothing(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		before := e.dump(t)
		res, err := e.apply(context.Background(), calicoPlan(t), true)
		if err != nil {
			t.Fatal(err)
		}
		if got := statuses(res); got["handle would-create"] != 9 || got["block would-create"] != 1 {
			t.Fatalf("dry run: %v", got)
		}
		if e.dump(t) != before {
			t.Fatal("dry run wrote")
		}
	})
}

func TestConflictsWriteNothing(t *testing.T) {
	ctx := context.Background()
	const node = "ip-10-200-205-203"
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, e *env)
		mention string
	}{
		{"overlapping pool", func(t *testing.T, e *env) {
			e.createPool(t, ipam.Pool{Name: "default", CIDR: netip.MustParsePrefix("100.112.0.0/16"), BlockSize: 26})
		}, "overlaps"},
		{"same name, other CIDR", func(t *testing.T, e *env) {
			e.createPool(t, ipam.Pool{Name: "calico-100.112.209.128-26", CIDR: netip.MustParsePrefix("10.0.0.0/24"), BlockSize: 26})
		}, "10.0.0.0/24"},
		{"address held by another handle", func(t *testing.T, e *env) {
			if _, err := e.apply(ctx, calicoPlan(t), false); err != nil {
				t.Fatal(err)
			}
			a := netip.MustParseAddr("100.112.209.150")
			e.freeAddr(t, a)
			if _, err := e.allocate(ctx, allocator.Request{Handle: ipam.Handle{ID: "net.other.eth0", Node: node}, Sets: [][]string{{"calico-100.112.209.128-26"}}, Want: []netip.Addr{a}}); err != nil {
				t.Fatal(err)
			}
		}, "100.112.209.150 is held by net.other.eth0"},
		{"handle with other addresses", func(t *testing.T, e *env) {
			e.otherHandle(t, node, "k8s-pod-network.884e11ced699fe17a493ffd59f18c97fd090fd8150411a11643a280a8250c510.eth0")
		}, "handle k8s-pod-network.884e11ced699fe17a493ffd59f18c97fd090fd8150411a11643a280a8250c510.eth0 exists with addresses"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachEnv(t, func(t *testing.T, e *env) {
				tc.prepare(t, e)
				before := e.dump(t)
				_, err := e.apply(ctx, calicoPlan(t), false)
				if !errors.Is(err, importer.ErrConflict) || !strings.Contains(err.Error(), tc.mention) {
					t.Fatalf("err = %v, want ErrConflict mentioning %q", err, tc.mention)
				}
				if e.dump(t) != before {
					t.Fatal("a refused import wrote to the store")
				}
			})
		})
	}
}

// TestTestdataMatchesShared: testdata/ holds copies of the project's shared
// real test data (so a clone has them); shared/ sits beside the checkout
// (the git top level's parent), wherever it is cloned, and the copies must
// not have drifted from it. Without shared/ beside the checkout the test
// skips on a developer's machine and fails under CI=true.
func TestTestdataMatchesShared(t *testing.T) {
	shared := filepath.Join(filepath.Dir(checkoutRoot(t)), "shared", "testdata")
	if _, err := os.Stat(shared); err != nil {
		if testenv.InCI() {
			t.Fatalf("%s: %v; under CI=true the project's shared test data must sit beside the checkout", shared, err)
		}
		t.Skipf("no %s beside the checkout: the copies in testdata/ are the data", shared)
	}
	names := func(dir string) []string {
		es, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range es {
			if e.Type().IsRegular() && e.Name() != "README.md" {
				out = append(out, e.Name())
			}
		}
		return out
	}
	mine, theirs := names("testdata"), names(shared)
	if !slices.Equal(mine, theirs) {
		t.Errorf("testdata/ holds %v, %s holds %v", mine, shared, theirs)
	}
	for _, n := range mine {
		orig, err := os.ReadFile(filepath.Join(shared, n))
		if err != nil {
			t.Errorf("testdata/%s: %v", n, err)
			continue
		}
		copied, err := os.ReadFile(filepath.Join("testdata", n))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(orig, copied) {
			t.Errorf("testdata/%s differs from %s", n, filepath.Join(shared, n))
		}
	}
}

// checkoutRoot is the top level of the git checkout holding this package
// (or, outside git, the directory of the module's go.mod).
func checkoutRoot(t *testing.T) string {
	t.Helper()
	if out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output(); err == nil {
		return strings.TrimSpace(string(out))
	}
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("neither a git checkout nor a go.mod above the test's directory")
		}
		dir = parent
	}
}
