package kvbacked_test

import (
	"context"
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
)

// v1Pools are pools with every field the first layout stores set.
var v1Pools = []ipam.Pool{
	{Name: "v4", CIDR: netip.MustParsePrefix("10.8.0.0/16"), BlockSize: 26, Gateway: netip.MustParseAddr("10.8.0.1"),
		RangeStart: netip.MustParseAddr("10.8.0.10"), RangeEnd: netip.MustParseAddr("10.8.200.0"),
		Exclude: []netip.Prefix{netip.MustParsePrefix("10.8.1.0/24")}, StrictAffinity: true, Origin: "config"},
	{Name: "fd08::-64", CIDR: netip.MustParsePrefix("fd08::/64"), BlockSize: 122, Origin: "cli", Disabled: true, NodeSelector: "zone=a"},
}

// newAllocator is today's allocator on s.
func newAllocator(t testing.TB, s kv.Store) *allocator.Allocator {
	t.Helper()
	return allocator.New(s, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
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

// Pools made by today's allocator read back unchanged through GetPool and
// ListPools; a pool the typed store updates is read by the allocator; the
// first layout's blocks, affinities and handles are neither listed nor
// changed by anything the typed store writes.
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
			h, err := a.Allocate(ctx, allocator.Request{
				Handle: ipam.Handle{ID: "net.c1.eth0", Network: "net", ContainerID: "c1", IfName: "eth0", Node: "node-a"},
				Sets:   [][]string{{"v4"}}})
			if err != nil {
				t.Fatal(err)
			}
			s := kvbacked.New(kvs)
			defer s.Close()
			for _, want := range v1Pools {
				got, err := s.GetPool(ctx, want.Name)
				if err != nil {
					t.Fatal(err)
				}
				if stored, _ := a.Pool(ctx, want.Name); !reflect.DeepEqual(got.Spec, stored) || !reflect.DeepEqual(got.Spec, want) {
					t.Fatalf("GetPool(%s) = %+v\nthe allocator stored %+v\nfrom %+v", want.Name, got.Spec, stored, want)
				}
			}
			listed, err := s.ListPools(ctx)
			if err != nil || len(listed) != len(v1Pools) {
				t.Fatalf("ListPools: %d pools (%v), want %d", len(listed), err, len(v1Pools))
			}
			for _, sel := range []store.ClaimSelector{{}, {Node: "node-a"}, {Pool: "v4"}} {
				if cs, err := s.ListClaims(ctx, sel); err != nil || len(cs) != 0 {
					t.Fatalf("ListClaims(%+v) of a first-layout store: %v, %v; want none", sel, cs, err)
				}
			}
			if ns, err := s.ListNodes(ctx, store.NodeSelector{}); err != nil || len(ns) != 0 {
				t.Fatalf("ListNodes of a first-layout store: %v, %v; want none", ns, err)
			}

			// Typed writes leave the first layout's keys alone.
			v1 := snapshot(t, kvs, "")
			for k := range v1 {
				if strings.HasPrefix(k, "pools/") {
					delete(v1, k)
				}
			}
			p, _ := s.GetPool(ctx, "fd08::-64")
			p.Spec.Disabled = false
			if _, err := s.UpdatePool(ctx, p); err != nil {
				t.Fatal(err)
			}
			if e := snapshot(t, kvs, allocator.PoolKey("fd08::-64"))[allocator.PoolKey("fd08::-64")]; string(e.Value) != string(allocator.Encode(p.Spec)) {
				t.Fatalf("UpdatePool stored %s, the allocator writes %s", e.Value, allocator.Encode(p.Spec))
			}
			if got, err := a.Pool(ctx, "fd08::-64"); err != nil || got.Disabled || !reflect.DeepEqual(got, p.Spec) {
				t.Fatalf("the allocator reads %+v (%v) after UpdatePool of %+v", got, err, p.Spec)
			}
			blk := h.IPs[0].Block
			if _, err := s.CreateClaim(ctx, store.Claim{BlockRef: store.BlockRef{Pool: "v4", CIDR: blk}, Node: "node-a"}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.CreateNode(ctx, lenderNode(t, "node-a", 2, "node-b")); err != nil {
				t.Fatal(err)
			}
			after := snapshot(t, kvs, "")
			for k, e := range v1 {
				if got, ok := after[k]; !ok || got.Version != e.Version || string(got.Value) != string(e.Value) {
					t.Errorf("first-layout key %s changed by typed writes", k)
				}
			}
			newKeys := 0
			for k := range after {
				if _, old := v1[k]; !old && !strings.HasPrefix(k, "pools/") {
					newKeys++
				}
			}
			if newKeys != 4 { // claim, its index, node object, lends entry
				t.Fatalf("typed writes added %d keys: %v", newKeys, slices.Sorted(maps.Keys(after)))
			}
		})
	}
}
