package storetest

import (
	"context"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

func testPoolLifecycle(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			_, err := s.GetPool(ctx, f.pool.Name)
			wantErr(t, err, store.ErrNotFound, "GetPool before create")

			created, err := s.CreatePool(ctx, store.Pool{Spec: f.pool})
			noErr(t, err, "CreatePool")
			if created.Version == "" || !reflect.DeepEqual(created.Spec, f.pool) {
				t.Fatalf("CreatePool returned %+v, want the pool with a version", created)
			}
			got, err := s.GetPool(ctx, f.pool.Name)
			noErr(t, err, "GetPool")
			if got.Version != created.Version || !reflect.DeepEqual(got.Spec, f.pool) {
				t.Fatalf("GetPool = %+v, want %+v", got, created)
			}
			_, err = s.CreatePool(ctx, store.Pool{Spec: f.pool})
			wantErr(t, err, store.ErrExists, "second CreatePool")

			changed := got
			changed.Spec.Disabled = true
			updated, err := s.UpdatePool(ctx, changed)
			noErr(t, err, "UpdatePool at the current version")
			if updated.Version == "" || updated.Version == created.Version || !updated.Spec.Disabled {
				t.Fatalf("UpdatePool returned %+v: want a new version and the change", updated)
			}
			stale := got
			stale.Spec.Deleting = true
			_, err = s.UpdatePool(ctx, stale)
			wantErr(t, err, store.ErrConflict, "UpdatePool at a stale version")
			err = s.DeletePool(ctx, got)
			wantErr(t, err, store.ErrConflict, "DeletePool at a stale version")
			now, err := s.GetPool(ctx, f.pool.Name)
			noErr(t, err, "GetPool after failed writes")
			if now.Version != updated.Version || now.Spec.Deleting || !now.Spec.Disabled {
				t.Fatalf("failed writes changed the pool: %+v, want %+v", now, updated)
			}

			noErr(t, s.DeletePool(ctx, updated), "DeletePool at the current version")
			_, err = s.GetPool(ctx, f.pool.Name)
			wantErr(t, err, store.ErrNotFound, "GetPool after delete")
			_, err = s.UpdatePool(ctx, updated)
			wantErr(t, err, store.ErrNotFound, "UpdatePool of a deleted pool")
			wantErr(t, s.DeletePool(ctx, updated), store.ErrNotFound, "DeletePool of a deleted pool")
		})
	}
}

// testPoolNames: names the Kubernetes API cannot hold as they are (':',
// '_', upper case, 253 bytes) are distinct pools that read back exactly.
func testPoolNames(t *testing.T, s store.Store) {
	ctx := t.Context()
	names := []string{
		"fd00::-64", "fd00--64", "FD00--64", "pool_a", "pool-a", "pool.a", "a",
		strings.Repeat("x", store.MaxNameBytes), strings.Repeat("x", store.MaxNameBytes-1) + "y",
		"10.22.0.0-16-10.22.0.10-10.22.0.200", "net:with:colons", "Ünïcode",
	}
	for i, n := range names {
		p := families[i%2].pool
		p.Name = n
		_, err := s.CreatePool(ctx, store.Pool{Spec: p})
		noErr(t, err, "CreatePool "+n)
	}
	for i, n := range names {
		got, err := s.GetPool(ctx, n)
		noErr(t, err, "GetPool "+n)
		want := families[i%2].pool
		want.Name = n
		if !reflect.DeepEqual(got.Spec, want) {
			t.Fatalf("GetPool(%q) = %+v, want %+v", n, got.Spec, want)
		}
	}
	all, err := s.ListPools(ctx)
	noErr(t, err, "ListPools")
	var listed []string
	for _, p := range all {
		listed = append(listed, p.Spec.Name)
	}
	want := slices.Sorted(slices.Values(names))
	if !slices.Equal(listed, want) {
		t.Fatalf("ListPools = %q, want %q", listed, want)
	}
}

// testPoolInvalid: a pool that fails validation or has a name no backend
// can key is refused with ErrInvalid and nothing is stored.
func testPoolInvalid(t *testing.T, s store.Store) {
	ctx := t.Context()
	ok := families[0].pool
	cases := []struct {
		name string
		edit func(p *ipam.Pool)
	}{
		{"empty name", func(p *ipam.Pool) { p.Name = "" }},
		{"slash in name", func(p *ipam.Pool) { p.Name = "a/b" }},
		{"NUL in name", func(p *ipam.Pool) { p.Name = "a\x00b" }},
		{"name over 253 bytes", func(p *ipam.Pool) { p.Name = strings.Repeat("n", store.MaxNameBytes+1) }},
		{"IPv4 host bits", func(p *ipam.Pool) { p.CIDR = netip.MustParsePrefix("10.20.0.1/16") }},
		{"IPv6 smaller than block", func(p *ipam.Pool) {
			p.CIDR = netip.MustParsePrefix("fd00::/124")
			p.BlockSize = 122
			p.Gateway = netip.Addr{}
		}},
		{"no CIDR", func(p *ipam.Pool) { p.CIDR = netip.Prefix{} }},
	}
	for _, c := range cases {
		p := ok
		c.edit(&p)
		_, err := s.CreatePool(ctx, store.Pool{Spec: p})
		wantErr(t, err, store.ErrInvalid, "CreatePool with "+c.name)
	}
	created, err := s.CreatePool(ctx, store.Pool{Spec: ok})
	noErr(t, err, "CreatePool")
	bad := created
	bad.Spec.BlockSize = 99
	_, err = s.UpdatePool(ctx, bad)
	wantErr(t, err, store.ErrInvalid, "UpdatePool with block size /99")
	all, err := s.ListPools(ctx)
	noErr(t, err, "ListPools")
	if len(all) != 1 || !reflect.DeepEqual(all[0], created) {
		t.Fatalf("after refused writes the store holds %+v, want only %+v", all, created)
	}
}

func testListPools(t *testing.T, s store.Store) {
	ctx := t.Context()
	all, err := s.ListPools(ctx)
	noErr(t, err, "ListPools of an empty store")
	if len(all) != 0 {
		t.Fatalf("empty store lists %d pools", len(all))
	}
	var want []store.Pool
	for _, n := range []string{"c", "a", "b"} {
		p := families[1].pool
		p.Name = n
		created, err := s.CreatePool(ctx, store.Pool{Spec: p})
		noErr(t, err, "CreatePool")
		want = append(want, created)
	}
	slices.SortFunc(want, func(a, b store.Pool) int { return strings.Compare(a.Spec.Name, b.Spec.Name) })
	all, err = s.ListPools(ctx)
	noErr(t, err, "ListPools")
	if !reflect.DeepEqual(all, want) {
		t.Fatalf("ListPools = %+v, want %+v", all, want)
	}
}

func testCancelledContext(t *testing.T, s store.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.CreatePool(ctx, store.Pool{Spec: families[0].pool}); err == nil {
		t.Fatal("CreatePool with a cancelled context succeeded")
	}
	if _, err := s.GetNode(ctx, "n"); err == nil {
		t.Fatal("GetNode with a cancelled context succeeded")
	}
	_, err := s.GetPool(t.Context(), families[0].pool.Name)
	wantErr(t, err, store.ErrNotFound, "GetPool after a cancelled create")
}
