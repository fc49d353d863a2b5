package kube

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// TestPools: create, get, list, compare-and-swap update and delete of
// pools of both families, every field read back as written.
func TestPools(t *testing.T) {
	st := openStore(t)
	ctx := ctxT(t)
	for _, spec := range []ipam.Pool{pool4, pool6} {
		p, err := st.CreatePool(ctx, store.Pool{Spec: spec})
		if err != nil {
			t.Fatalf("create pool %q: %v", spec.Name, err)
		}
		if p.Version == "" {
			t.Fatalf("create pool %q returned no version", spec.Name)
		}
		got, err := st.GetPool(ctx, spec.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, p) {
			t.Fatalf("pool read back as %+v, want %+v", got, p)
		}
		if _, err := st.CreatePool(ctx, store.Pool{Spec: spec}); !errors.Is(err, store.ErrExists) {
			t.Fatalf("second create of pool %q: %v, want ErrExists", spec.Name, err)
		}
		stale := p
		changed := p
		changed.Spec.Disabled = !changed.Spec.Disabled
		if changed, err = st.UpdatePool(ctx, changed); err != nil || changed.Version == p.Version {
			t.Fatalf("update pool %q: %v (version %q → %q)", spec.Name, err, p.Version, changed.Version)
		}
		if _, err := st.UpdatePool(ctx, stale); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("update of pool %q at a stale version: %v, want ErrConflict", spec.Name, err)
		}
		if err := st.DeletePool(ctx, stale); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("delete of pool %q at a stale version: %v, want ErrConflict", spec.Name, err)
		}
		if _, err := st.UpdatePool(ctx, store.Pool{Spec: changed.Spec}); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("update of pool %q without a version: %v, want ErrConflict", spec.Name, err)
		}
		if got, _ := st.GetPool(ctx, spec.Name); !reflect.DeepEqual(got, changed) {
			t.Fatalf("pool after refused writes %+v, want %+v", got, changed)
		}
	}
	list, err := st.ListPools(ctx)
	if err != nil || len(list) != 2 || list[0].Spec.Name != "blue" || list[1].Spec.Name != "fd00::-64" {
		t.Fatalf("ListPools = %+v, %v; want blue and fd00::-64", list, err)
	}
	for _, p := range list {
		if err := st.DeletePool(ctx, p); err != nil {
			t.Fatal(err)
		}
		if _, err := st.GetPool(ctx, p.Spec.Name); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("pool %q after delete: %v, want ErrNotFound", p.Spec.Name, err)
		}
		if err := st.DeletePool(ctx, p); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("second delete of pool %q: %v, want ErrNotFound", p.Spec.Name, err)
		}
		if _, err := st.UpdatePool(ctx, p); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("update of deleted pool %q: %v, want ErrNotFound", p.Spec.Name, err)
		}
	}
}

// TestSanitizedCollisions: names with the same readable form are distinct
// objects, each read back as itself.
func TestSanitizedCollisions(t *testing.T) {
	st := openStore(t)
	ctx := ctxT(t)
	names := []string{"pool-a", "Pool_A", "pool:a", "POOL A", "pool-a--" + hashOf("Pool_A"), strings.Repeat("p", 250) + ":x", strings.Repeat("p", 250) + ":y"}
	for i, name := range names {
		spec := pool4
		spec.Name = name
		spec.BlockSize = 24 + i
		if _, err := st.CreatePool(ctx, store.Pool{Spec: spec}); err != nil {
			t.Fatalf("create pool %q: %v", name, err)
		}
		c := store.Claim{BlockRef: store.BlockRef{Pool: name, CIDR: netip.MustParsePrefix("10.0.0.0/26")}, Node: name}
		if _, err := st.CreateClaim(ctx, c); err != nil {
			t.Fatalf("claim in pool %q: %v", name, err)
		}
	}
	for i, name := range names {
		p, err := st.GetPool(ctx, name)
		if err != nil || p.Spec.Name != name || p.Spec.BlockSize != 24+i {
			t.Fatalf("pool %q read back as %+v, %v", name, p.Spec, err)
		}
		cs, err := st.ListClaims(ctx, store.ClaimSelector{Node: name})
		if err != nil || len(cs) != 1 || cs[0].Pool != name {
			t.Fatalf("claims of node %q: %+v, %v; want its one claim", name, cs, err)
		}
	}
	if list, err := st.ListPools(ctx); err != nil || len(list) != len(names) {
		t.Fatalf("ListPools: %d pools, %v; want %d", len(list), err, len(names))
	}
}

// TestClaims: create-if-absent, get, delete at a version, both families,
// and selector lists by node and by pool.
func TestClaims(t *testing.T) {
	st := openStore(t)
	ctx := ctxT(t)
	claims := []store.Claim{
		{BlockRef: store.BlockRef{Pool: "blue", CIDR: netip.MustParsePrefix("10.0.0.64/26")}, Node: "node-a"},
		{BlockRef: store.BlockRef{Pool: "blue", CIDR: netip.MustParsePrefix("10.0.0.0/26")}, Node: "node-b"},
		{BlockRef: store.BlockRef{Pool: "fd00::-64", CIDR: netip.MustParsePrefix("fd00:22::40/122")}, Node: "node-a"},
		{BlockRef: store.BlockRef{Pool: "fd00::-64", CIDR: netip.MustParsePrefix("::/122")}, Node: "node-a"},
	}
	for i, c := range claims {
		got, err := st.CreateClaim(ctx, c)
		if err != nil || got.Version == "" {
			t.Fatalf("claim %s: %v (version %q)", c.BlockRef, err, got.Version)
		}
		claims[i] = got
		other := c
		other.Node = "node-z"
		if _, err := st.CreateClaim(ctx, other); !errors.Is(err, store.ErrExists) {
			t.Fatalf("second claim of %s: %v, want ErrExists", c.BlockRef, err)
		}
		if back, err := st.GetClaim(ctx, c.BlockRef); err != nil || back != got {
			t.Fatalf("GetClaim %s = %+v, %v; want %+v", c.BlockRef, back, err, got)
		}
	}
	if _, err := st.GetClaim(ctx, store.BlockRef{Pool: "blue", CIDR: netip.MustParsePrefix("10.0.1.0/26")}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetClaim of an unclaimed block: %v, want ErrNotFound", err)
	}
	for _, c := range []struct {
		sel  store.ClaimSelector
		want []store.Claim
	}{
		{store.ClaimSelector{Node: "node-a"}, []store.Claim{claims[0], claims[3], claims[2]}},
		{store.ClaimSelector{Node: "node-b"}, []store.Claim{claims[1]}},
		{store.ClaimSelector{Pool: "blue"}, []store.Claim{claims[1], claims[0]}},
		{store.ClaimSelector{Pool: "fd00::-64"}, []store.Claim{claims[3], claims[2]}},
		{store.ClaimSelector{Node: "node-z"}, nil},
		{store.ClaimSelector{}, []store.Claim{claims[1], claims[0], claims[3], claims[2]}},
	} {
		got, err := st.ListClaims(ctx, c.sel)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ListClaims(%+v) = %+v, %v; want %+v", c.sel, got, err, c.want)
		}
	}
	stale := claims[0]
	stale.Version = "1"
	if err := st.DeleteClaim(ctx, stale); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("delete of a claim at a stale version: %v, want ErrConflict", err)
	}
	if err := st.DeleteClaim(ctx, claims[0]); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteClaim(ctx, claims[0]); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete of a claim: %v, want ErrNotFound", err)
	}
}

// TestNodes: a full dual-stack node object with a borrowed record and an
// attachment-less handle is written and read back equal; updates are
// compare-and-swap; LendsTo lists exactly the lenders, as the content
// changes.
func TestNodes(t *testing.T) {
	st := openStore(t)
	ctx := ctxT(t)
	n := dualStackNode(t, "node-a", "node-b")
	if n.Handles[0].IPs == nil || len(n.LendsTo()) != 1 {
		t.Fatal("fixture: want a dual-stack handle and one borrower")
	}
	created, err := st.CreateNode(ctx, claimed(t, st, n))
	if err != nil {
		t.Fatal(err)
	}
	got, err := st.GetNode(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	sameNode(t, got, created)
	if _, err := st.CreateNode(ctx, n); !errors.Is(err, store.ErrExists) {
		t.Fatalf("second create: %v, want ErrExists", err)
	}
	lenders := func(borrower string) []string {
		t.Helper()
		ns, err := st.ListNodes(ctx, store.NodeSelector{LendsTo: borrower})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, n := range ns {
			out = append(out, n.Name)
		}
		return out
	}
	if got := lenders("node-b"); !reflect.DeepEqual(got, []string{"node-a"}) {
		t.Fatalf("lenders of node-b: %v, want [node-a]", got)
	}
	if got := lenders("node-a"); got != nil {
		t.Fatalf("lenders of node-a: %v, want none", got)
	}
	// Release the borrowed record: the object no longer lends to node-b.
	upd := got
	b6 := upd.Blocks[1]
	var err2 error
	if b6, err2 = b6.Release(upd.Handles[2].IPs[0].Addr, upd.Handles[2].ID); err2 != nil {
		t.Fatal(err2)
	}
	upd.Blocks = []ipam.Block{upd.Blocks[0], b6}
	upd.Handles = upd.Handles[:2]
	upd, err = st.UpdateNode(ctx, upd)
	if err != nil {
		t.Fatal(err)
	}
	if upd.Version == got.Version {
		t.Fatal("update kept the version")
	}
	if got := lenders("node-b"); got != nil {
		t.Fatalf("lenders of node-b after the release: %v, want none", got)
	}
	if _, err := st.UpdateNode(ctx, got); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("update at a stale version: %v, want ErrConflict", err)
	}
	if err := st.DeleteNode(ctx, got); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("delete at a stale version: %v, want ErrConflict", err)
	}
	unversioned := got
	unversioned.Version = ""
	if _, err := st.UpdateNode(ctx, unversioned); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("update without a version: %v, want ErrConflict", err)
	}
	if err := st.DeleteNode(ctx, unversioned); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("delete without a version: %v, want ErrConflict", err)
	}
	back, err := st.GetNode(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	sameNode(t, back, upd)
	// Another object lends to node-b; a long, hashed name lends too.
	long := strings.Repeat("Long-Node_", 20)
	for i, name := range []string{"node-c", long} {
		if _, err := st.CreateNode(ctx, claimed(t, st, dualStackNodeIn(t, name, "node-b", i+1))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.CreateNode(ctx, claimed(t, st, dualStackNodeIn(t, "node-d", long, 3))); err != nil {
		t.Fatal(err)
	}
	if got := lenders("node-b"); !reflect.DeepEqual(got, []string{long, "node-c"}) {
		t.Fatalf("lenders of node-b: %v, want [%s node-c]", got, long)
	}
	if got := lenders(long); !reflect.DeepEqual(got, []string{"node-d"}) {
		t.Fatalf("lenders of %s: %v, want [node-d]", long, got)
	}
	all, err := st.ListNodes(ctx, store.NodeSelector{})
	if err != nil || len(all) != 4 {
		t.Fatalf("ListNodes: %d, %v; want 4", len(all), err)
	}
	if err := st.DeleteNode(ctx, upd); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetNode(ctx, "node-a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetNode after delete: %v, want ErrNotFound", err)
	}
	if _, err := st.UpdateNode(ctx, upd); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update of a deleted node object: %v, want ErrNotFound", err)
	}
}

// TestPartitions: two stores with different prefixes share the cluster and
// see only their own objects under the same names.
func TestPartitions(t *testing.T) {
	a, b := openStore(t), openStore(t)
	ctx := ctxT(t)
	for i, st := range []*Store{a, b} {
		spec := pool4
		spec.BlockSize = 24 + i
		if _, err := st.CreatePool(ctx, store.Pool{Spec: spec}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.CreateNode(ctx, claimed(t, st, dualStackNode(t, "node-a", "node-b"))); err != nil {
			t.Fatal(err)
		}
	}
	for i, st := range []*Store{a, b} {
		ps, err := st.ListPools(ctx)
		if err != nil || len(ps) != 1 || ps[0].Spec.BlockSize != 24+i {
			t.Fatalf("partition %s: pools %+v, %v", st.Prefix(), ps, err)
		}
		ns, err := st.ListNodes(ctx, store.NodeSelector{LendsTo: "node-b"})
		if err != nil || len(ns) != 1 {
			t.Fatalf("partition %s: lenders %d, %v; want 1", st.Prefix(), len(ns), err)
		}
	}
}

// TestUnchangedWriteIsNewVersion: the API server keeps the resourceVersion
// of a PUT that changes nothing; the contract wants a new version for every
// write (pool removal writes holders' objects unchanged as a fence: an
// allocation that read the object before must then fail its
// compare-and-swap). So the same content written twice gives two versions,
// and the first is stale.
func TestUnchangedWriteIsNewVersion(t *testing.T) {
	st := openStore(t)
	ctx := ctxT(t)
	n, err := st.CreateNode(ctx, claimed(t, st, dualStackNode(t, "node-a", "node-b")))
	if err != nil {
		t.Fatal(err)
	}
	before := n
	if n, err = st.UpdateNode(ctx, n); err != nil {
		t.Fatal(err)
	}
	if n.Version == before.Version {
		t.Fatalf("an unchanged UpdateNode kept version %q", n.Version)
	}
	if _, err := st.UpdateNode(ctx, before); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("update at the version before the unchanged write: %v, want ErrConflict", err)
	}
	p, err := st.CreatePool(ctx, store.Pool{Spec: pool4})
	if err != nil {
		t.Fatal(err)
	}
	q, err := st.UpdatePool(ctx, p)
	if err != nil || q.Version == p.Version {
		t.Fatalf("an unchanged UpdatePool: version %q → %q, %v; want a new version", p.Version, q.Version, err)
	}
}
