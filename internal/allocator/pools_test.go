package allocator_test

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// fam is one address family of the side-by-side tests. Its pools are cut
// into blocks of 8 addresses starting at base.
type fam struct {
	name string
	base netip.Addr
}

var fams = []fam{{"v4", addr("10.1.0.0")}, {"v6", addr("fd01::")}}

// forFams runs fn once per family as subtests "v4" and "v6".
func forFams(t *testing.T, fn func(t *testing.T, f fam)) {
	t.Helper()
	for _, f := range fams {
		t.Run(f.name, func(t *testing.T) { fn(t, f) })
	}
}

// pool returns a pool of n (a power of two) blocks of 8 addresses.
func (f fam) pool(name string, n int) ipam.Pool {
	bl := f.base.BitLen()
	return ipam.Pool{Name: name, CIDR: netip.PrefixFrom(f.base, bl-3-(bits.Len(uint(n))-1)), BlockSize: bl - 3}
}

// addr returns base+i.
func (f fam) addr(i int) netip.Addr {
	a := f.base
	for range i {
		a = a.Next()
	}
	return a
}

// block returns the i-th block of 8 addresses.
func (f fam) block(i int) netip.Prefix { return netip.PrefixFrom(f.addr(8*i), f.base.BitLen()-3) }

func TestEnsurePool(t *testing.T) {
	ctx := context.Background()
	forFams(t, func(t *testing.T, f fam) {
		a, s := setup(t)
		p := f.pool("p", 4)
		p.Gateway = f.addr(1)
		p.Origin = "config"
		got, err := a.EnsurePool(ctx, p)
		if err != nil || !got.SameDefinition(p) || got.Name != "p" {
			t.Fatalf("EnsurePool = %+v, %v", got, err)
		}
		if stored, err := a.Pool(ctx, "p"); err != nil || !stored.SameDefinition(p) || stored.Origin != "config" {
			t.Fatalf("stored pool = %+v, %v", stored, err)
		}

		t.Run("idempotent", func(t *testing.T) {
			before := snapshot(t, s)
			again := p
			again.Exclude = nil
			again.NodeSelector = "zone=a" // not part of the definition: kept as stored
			got, err := a.EnsurePool(ctx, again)
			if err != nil || got.NodeSelector != "" || !got.SameDefinition(p) {
				t.Fatalf("EnsurePool again = %+v, %v", got, err)
			}
			sameStore(t, "EnsurePool of the same definition", before, s)
		})

		t.Run("conflict", func(t *testing.T) {
			before := snapshot(t, s)
			other := p
			other.Gateway = f.addr(2)
			_, err := a.EnsurePool(ctx, other)
			if !errors.Is(err, allocator.ErrPoolConflict) {
				t.Fatalf("EnsurePool with another gateway = %v, want ErrPoolConflict", err)
			}
			for _, want := range []string{`pool "p"`, "stored as", "gateway " + f.addr(1).String(), "gateway " + f.addr(2).String(), "ipkeeperctl pool rm p"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("conflict message %q does not contain %q", err, want)
				}
			}
			sameStore(t, "conflicting EnsurePool", before, s)
		})

		t.Run("import origin adopts the config definition", func(t *testing.T) {
			imp := f.pool("imported", 4)
			imp.Origin = "import"
			if err := a.CreatePool(ctx, imp); err != nil {
				t.Fatal(err)
			}
			conf := imp
			conf.Origin = "config"
			conf.Gateway = f.addr(1)
			conf.RangeStart = f.addr(2)
			got, err := a.EnsurePool(ctx, conf)
			if err != nil || got.Gateway != f.addr(1) || got.RangeStart != f.addr(2) {
				t.Fatalf("EnsurePool over an imported pool = %+v, %v", got, err)
			}
			stored, err := a.Pool(ctx, "imported")
			if err != nil || !stored.SameDefinition(conf) || stored.Origin != "config" {
				t.Fatalf("stored = %+v, %v; want the config definition", stored, err)
			}
			// Once adopted the pool is the config's: a different range conflicts.
			conf.RangeStart = f.addr(3)
			if _, err := a.EnsurePool(ctx, conf); !errors.Is(err, allocator.ErrPoolConflict) {
				t.Fatalf("EnsurePool after adoption = %v, want ErrPoolConflict", err)
			}
		})

		t.Run("import origin with another cidr conflicts", func(t *testing.T) {
			imp := f.pool("imported2", 4)
			imp.Origin = "import"
			if err := a.CreatePool(ctx, imp); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, s)
			conf := f.pool("imported2", 8)
			if _, err := a.EnsurePool(ctx, conf); !errors.Is(err, allocator.ErrPoolConflict) {
				t.Fatalf("EnsurePool = %v, want ErrPoolConflict", err)
			}
			sameStore(t, "conflicting EnsurePool", before, s)
		})

		t.Run("pool smaller than its block size", func(t *testing.T) {
			before := snapshot(t, s)
			small := f.pool("small", 1)
			small.BlockSize -= 2
			_, err := a.EnsurePool(ctx, small)
			if !errors.Is(err, ipam.ErrInvalidPool) || !strings.Contains(err.Error(), "smaller than its block size") {
				t.Fatalf("EnsurePool(%s /%d) = %v, want a message saying it is smaller than its block size", small.CIDR, small.BlockSize, err)
			}
			if err := a.CreatePool(ctx, small); !errors.Is(err, ipam.ErrInvalidPool) {
				t.Fatalf("CreatePool = %v, want ErrInvalidPool", err)
			}
			sameStore(t, "an invalid pool", before, s)
			if _, err := a.Pool(ctx, "small"); !errors.Is(err, allocator.ErrPoolNotFound) {
				t.Errorf("Pool(small) = %v, want ErrPoolNotFound", err)
			}
		})

		t.Run("CreatePool refuses an existing name", func(t *testing.T) {
			err := a.CreatePool(ctx, f.pool("p", 8))
			if !errors.Is(err, allocator.ErrPoolConflict) || !strings.Contains(err.Error(), "already exists") {
				t.Fatalf("CreatePool = %v, want ErrPoolConflict", err)
			}
		})
	})
}

func TestDeletePool(t *testing.T) {
	ctx := context.Background()
	forFams(t, func(t *testing.T, f fam) {
		a, s := setup(t, f.pool("p", 4), f.pool2("other", 4))
		allocate(t, a, "node-a", "h1", set("p"))
		allocate(t, a, "node-b", "h2", set("p"))
		allocate(t, a, "node-b", "h3", set("p"))
		allocate(t, a, "node-b", "o1", set("other"))

		before := snapshot(t, s)
		err := a.DeletePool(ctx, "p")
		if !errors.Is(err, allocator.ErrPoolInUse) || !strings.Contains(err.Error(), "has 3 addresses in use") {
			t.Fatalf("DeletePool in use = %v, want ErrPoolInUse with the count", err)
		}
		sameStore(t, "refused DeletePool", before, s)

		for _, h := range []string{"h1", "h2", "h3"} {
			if _, err := a.Release(ctx, h); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.DeletePool(ctx, "p"); err != nil {
			t.Fatalf("DeletePool of an empty pool: %v", err)
		}
		if _, err := a.Pool(ctx, "p"); !errors.Is(err, allocator.ErrPoolNotFound) {
			t.Errorf("Pool after delete = %v", err)
		}
		if ks := keys(t, s, "blocks/p/"); len(ks) > 0 {
			t.Errorf("blocks left: %v", ks)
		}
		for _, k := range keys(t, s, "affinity/") {
			if strings.Contains(k, "/p/") {
				t.Errorf("affinity left: %s", k)
			}
		}
		// The other pool is untouched.
		if len(keys(t, s, "blocks/other/")) != 1 || len(keys(t, s, "affinity/node-b/other/")) != 1 {
			t.Errorf("DeletePool touched another pool: %v", snapshot(t, s))
		}
		checkConsistent(t, a, s)
		if err := a.DeletePool(ctx, "p"); !errors.Is(err, allocator.ErrPoolNotFound) {
			t.Errorf("second DeletePool = %v, want ErrPoolNotFound", err)
		}
	})
}

// pool2 returns a pool of n blocks placed after the first 1024 addresses,
// so that it does not overlap pool().
func (f fam) pool2(name string, n int) ipam.Pool {
	p := f.pool(name, n)
	p.CIDR = netip.PrefixFrom(f.addr(1024), p.CIDR.Bits())
	return p
}

func TestPools(t *testing.T) {
	forFams(t, func(t *testing.T, f fam) {
		a, _ := setup(t, f.pool2("b", 2), f.pool("a", 2))
		ps, err := a.Pools(context.Background())
		if err != nil || len(ps) != 2 || ps[0].Name != "a" || ps[1].Name != "b" {
			t.Fatalf("Pools = %+v, %v", ps, err)
		}
		_, err = a.Pool(context.Background(), "c")
		if !errors.Is(err, allocator.ErrPoolNotFound) {
			t.Errorf("Pool(c) = %v", err)
		}
		_, err = a.Allocate(context.Background(), request("n", "h", set("c")))
		if !errors.Is(err, allocator.ErrPoolNotFound) || !strings.Contains(err.Error(), fmt.Sprintf("%q", "c")) {
			t.Errorf("Allocate from a missing pool = %v, want ErrPoolNotFound naming it", err)
		}
	})
}
