package migrate_test

import (
	"errors"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked/migrate"
)

// firstPools are pools with every field the first layout stores set.
var firstPools = []ipam.Pool{
	{Name: "v4", CIDR: netip.MustParsePrefix("10.8.0.0/16"), BlockSize: 26, Gateway: netip.MustParseAddr("10.8.0.1"),
		RangeStart: netip.MustParseAddr("10.8.0.10"), RangeEnd: netip.MustParseAddr("10.8.200.0"),
		Exclude: []netip.Prefix{netip.MustParsePrefix("10.8.1.0/24")}, StrictAffinity: true, Origin: "config"},
	{Name: "fd08::-64", CIDR: netip.MustParsePrefix("fd08::/64"), BlockSize: 122, Origin: "cli", Disabled: true, NodeSelector: "zone=a"},
}

// Pools of the first layout are not the typed store's until Run copies
// them: then GetPool and ListPools read them back unchanged, the
// first-layout pool keys are marked Deleting (the fence) and a plugin of
// the earlier version allocates from none of them; the first layout's keys
// are neither listed nor changed by anything the typed store writes.
func TestFirstLayoutPoolsCarryOver(t *testing.T) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			kvs := b.Open(t)
			a := firstLayoutPlugin{kvs}
			for _, p := range firstPools {
				a.createPool(t, p)
			}
			h, err := a.allocate(ctx, podHandle("node-a", "c1"), []string{"v4"})
			if err != nil {
				t.Fatal(err)
			}
			s := kvbacked.New(kvs)
			defer s.Close()
			if listed, err := s.ListPools(ctx); err != nil || len(listed) != 0 {
				t.Fatalf("ListPools before Run: %v, %v; want none", listed, err)
			}
			if _, err := migrate.Run(ctx, kvs); err != nil {
				t.Fatal(err)
			}
			for _, want := range firstPools {
				got, err := s.GetPool(ctx, want.Name)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got.Spec, want) {
					t.Fatalf("GetPool(%s) = %+v\nthe first layout stored %+v", want.Name, got.Spec, want)
				}
				if stored := a.pool(t, want.Name); !stored.Deleting {
					t.Errorf("first-layout pool %s not fenced: %+v", want.Name, stored)
				}
			}
			listed, err := s.ListPools(ctx)
			if err != nil || len(listed) != len(firstPools) {
				t.Fatalf("ListPools: %d pools (%v), want %d", len(listed), err, len(firstPools))
			}
			if _, err := a.allocate(ctx, podHandle("node-a", "c2"), []string{"v4"}); !errors.Is(err, errNoPool) {
				t.Fatalf("the earlier version's ADD after the fence: %v, want errNoPool", err)
			}

			// Typed writes leave the first layout's keys alone.
			first := snapshot(t, kvs, "")
			p, _ := s.GetPool(ctx, "fd08::-64")
			p.Spec.Disabled = false
			if _, err := s.UpdatePool(ctx, p); err != nil {
				t.Fatal(err)
			}
			if got := a.pool(t, "fd08::-64"); !got.Disabled || !got.Deleting {
				t.Fatalf("the first layout's pool reads %+v after UpdatePool of %+v", got, p.Spec)
			}
			blk := h.IPs[0].Block
			if _, err := s.CreateClaim(ctx, store.Claim{BlockRef: store.BlockRef{Pool: "v4", CIDR: blk}, Node: "node-b"}); !errors.Is(err, store.ErrExists) {
				t.Fatalf("claim of a migrated block: %v, want ErrExists", err)
			}
			x := lender(t, "node-x", "node-b", firstPools[0])
			if _, err := s.CreateNode(ctx, x); err != nil {
				t.Fatal(err)
			}
			after := snapshot(t, kvs, "")
			for k, e := range first {
				if !strings.HasPrefix(k, "pools/") {
					continue
				}
				if got, ok := after[k]; !ok || got.Version != e.Version || string(got.Value) != string(e.Value) {
					t.Errorf("first-layout key %s changed by typed writes", k)
				}
			}
			newKeys := 0
			for k := range after {
				if _, old := first[k]; !old {
					newKeys++
				}
			}
			if want := 1 + len(x.Blocks) + len(x.Handles) + 1; newKeys != want { // head, blocks, records, lends entry
				t.Fatalf("typed writes added %d keys: %v", newKeys, slices.Sorted(maps.Keys(after)))
			}
		})
	}
}

// lender is node object name holding one block of p, which holds an
// address of a handle of borrower.
func lender(t *testing.T, name, borrower string, p ipam.Pool) store.Node {
	t.Helper()
	h := podHandle(borrower, "borrowed")
	blk, addr, err := ipam.NewBlock(p, p.BlockAt(1), name).Assign(p, h.ID)
	if err != nil {
		t.Fatal(err)
	}
	h.IPs = []ipam.HandleIP{{Addr: addr, Pool: p.Name, Block: blk.CIDR}}
	return store.Node{Name: name, Blocks: []ipam.Block{blk}, Handles: []ipam.Handle{h}}
}
