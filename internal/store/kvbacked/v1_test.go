package kvbacked_test

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked/firstlayout"
)

// v1Pools are pools with every field the first layout stores set.
var v1Pools = []ipam.Pool{
	{Name: "v4", CIDR: netip.MustParsePrefix("10.8.0.0/16"), BlockSize: 26, Gateway: netip.MustParseAddr("10.8.0.1"),
		RangeStart: netip.MustParseAddr("10.8.0.10"), RangeEnd: netip.MustParseAddr("10.8.200.0"),
		Exclude: []netip.Prefix{netip.MustParsePrefix("10.8.1.0/24")}, StrictAffinity: true, Origin: "config"},
	{Name: "fd08::-64", CIDR: netip.MustParsePrefix("fd08::/64"), BlockSize: 122, Origin: "cli", Disabled: true, NodeSelector: "zone=a"},
}

// newAllocator is the first-layout allocator on s.
func newAllocator(t testing.TB, s kv.Store) *firstlayout.Allocator {
	t.Helper()
	return firstlayout.New(s, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
}

// snapshot returns every key of s with its version and value.
func snapshot(t *testing.T, s kv.Store, prefix string) map[string]kv.KeyValue {
	t.Helper()
	es, err := s.List(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]kv.KeyValue{}
	for _, e := range es {
		out[e.Key] = e
	}
	return out
}

// Pools made by the first-layout allocator are not the typed store's until Migrate
// copies them: then GetPool and ListPools read them back unchanged, the
// first-layout pool keys are marked Deleting (the fence) and the
// first-layout allocator allocates from none of them; the first layout's keys are
// neither listed nor changed by anything the typed store writes.
func TestFirstLayoutPoolsCarryOver(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			kvs := b.open(t)
			a := newAllocator(t, kvs)
			for _, p := range v1Pools {
				if _, err := a.EnsurePool(ctx, p); err != nil {
					t.Fatal(err)
				}
			}
			req := func(c string) firstlayout.Request {
				return firstlayout.Request{Handle: ipam.Handle{ID: "net." + c + ".eth0", Network: "net", ContainerID: c, IfName: "eth0", Node: "node-a"},
					Sets: [][]string{{"v4"}}}
			}
			h, err := a.Allocate(ctx, req("c1"))
			if err != nil {
				t.Fatal(err)
			}
			s := kvbacked.New(kvs)
			defer s.Close()
			if listed, err := s.ListPools(ctx); err != nil || len(listed) != 0 {
				t.Fatalf("ListPools before Migrate: %v, %v; want none", listed, err)
			}
			if _, err := kvbacked.Migrate(ctx, kvs); err != nil {
				t.Fatal(err)
			}
			for _, want := range v1Pools {
				got, err := s.GetPool(ctx, want.Name)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got.Spec, want) {
					t.Fatalf("GetPool(%s) = %+v\nthe allocator stored %+v", want.Name, got.Spec, want)
				}
				if stored, _ := a.Pool(ctx, want.Name); !stored.Deleting {
					t.Errorf("first-layout pool %s not fenced: %+v", want.Name, stored)
				}
			}
			listed, err := s.ListPools(ctx)
			if err != nil || len(listed) != len(v1Pools) {
				t.Fatalf("ListPools: %d pools (%v), want %d", len(listed), err, len(v1Pools))
			}
			if _, err := a.Allocate(ctx, req("c2")); !errors.Is(err, allocator.ErrNoPool) {
				t.Fatalf("the first-layout Allocate after the fence: %v, want ErrNoPool", err)
			}

			// Typed writes leave the first layout's keys alone.
			v1 := snapshot(t, kvs, "")
			p, _ := s.GetPool(ctx, "fd08::-64")
			p.Spec.Disabled = false
			if _, err := s.UpdatePool(ctx, p); err != nil {
				t.Fatal(err)
			}
			if got, err := a.Pool(ctx, "fd08::-64"); err != nil || !got.Disabled || !got.Deleting {
				t.Fatalf("the first layout's pool reads %+v (%v) after UpdatePool of %+v", got, err, p.Spec)
			}
			blk := h.IPs[0].Block
			if _, err := s.CreateClaim(ctx, store.Claim{BlockRef: store.BlockRef{Pool: "v4", CIDR: blk}, Node: "node-b"}); !errors.Is(err, store.ErrExists) {
				t.Fatalf("claim of a migrated block: %v, want ErrExists", err)
			}
			if _, err := s.CreateNode(ctx, lenderNode(t, "node-x", 2, "node-b")); err != nil {
				t.Fatal(err)
			}
			after := snapshot(t, kvs, "")
			for k, e := range v1 {
				if !strings.HasPrefix(k, "pools/") {
					continue
				}
				if got, ok := after[k]; !ok || got.Version != e.Version || string(got.Value) != string(e.Value) {
					t.Errorf("first-layout key %s changed by typed writes", k)
				}
			}
			newKeys := 0
			for k := range after {
				if _, old := v1[k]; !old {
					newKeys++
				}
			}
			if newKeys != 2 { // node object, lends entry
				t.Fatalf("typed writes added %d keys: %v", newKeys, slices.Sorted(maps.Keys(after)))
			}
		})
	}
}
