package allocator_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store/local"
)

var (
	addr   = netip.MustParseAddr
	prefix = netip.MustParsePrefix
	epoch  = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
)

// openStore opens a real bbolt datastore in a fresh temp directory, closed
// when the test ends.
func openStore(tb testing.TB) *local.Store {
	tb.Helper()
	s, err := local.Open(context.Background(), tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("close store: %v", err)
		}
	})
	return s
}

// newAllocator returns an allocator over s with a fixed clock that logs
// warnings to the test log.
func newAllocator(tb testing.TB, s kv.Store) *allocator.Allocator {
	tb.Helper()
	log := slog.New(slog.NewTextHandler(tb.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	a := allocator.New(s, log)
	a.Now = func() time.Time { return epoch }
	return a
}

// setup opens a store and an allocator and ensures the pools.
func setup(tb testing.TB, pools ...ipam.Pool) (*allocator.Allocator, *local.Store) {
	tb.Helper()
	s := openStore(tb)
	a := newAllocator(tb, s)
	for _, p := range pools {
		if _, err := a.EnsurePool(context.Background(), p); err != nil {
			tb.Fatalf("EnsurePool(%s): %v", p.Name, err)
		}
	}
	return a, s
}

func request(node, id string, sets ...[]string) allocator.Request {
	return allocator.Request{
		Handle: ipam.Handle{ID: id, Network: "net", ContainerID: id, IfName: "eth0", Node: node},
		Sets:   sets,
	}
}

func set(pools ...string) []string { return pools }

// allocate allocates one address from each set and fails the test on error.
func allocate(tb testing.TB, a *allocator.Allocator, node, id string, sets ...[]string) ipam.Handle {
	tb.Helper()
	h, err := a.Allocate(context.Background(), request(node, id, sets...))
	if err != nil {
		tb.Fatalf("Allocate(%s on %s): %v", id, node, err)
	}
	return h
}

// snapshot returns every key of the store with its version and value.
func snapshot(tb testing.TB, s kv.Store) map[string]string {
	tb.Helper()
	es, err := s.List(context.Background(), "")
	if err != nil {
		tb.Fatal(err)
	}
	out := make(map[string]string, len(es))
	for _, e := range es {
		out[e.Key] = fmt.Sprintf("v%d %s", e.Version, e.Value)
	}
	return out
}

// sameStore fails when the store differs from an earlier snapshot.
func sameStore(tb testing.TB, what string, before map[string]string, s kv.Store) {
	tb.Helper()
	after := snapshot(tb, s)
	if maps.Equal(before, after) {
		return
	}
	for k := range after {
		if before[k] != after[k] {
			tb.Errorf("%s changed the store: %s: %q -> %q", what, k, before[k], after[k])
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			tb.Errorf("%s changed the store: %s deleted", what, k)
		}
	}
}

// keys lists the store's keys under prefix.
func keys(tb testing.TB, s kv.Store, prefix string) []string {
	tb.Helper()
	es, err := s.List(context.Background(), prefix)
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Key)
	}
	return out
}

// blocksByCIDR returns the pool's blocks keyed by prefix.
func blocksByCIDR(tb testing.TB, a *allocator.Allocator, pool string) map[netip.Prefix]ipam.Block {
	tb.Helper()
	bs, err := a.Blocks(context.Background(), pool)
	if err != nil {
		tb.Fatal(err)
	}
	out := map[netip.Prefix]ipam.Block{}
	for _, b := range bs {
		out[b.CIDR] = b
	}
	return out
}

// checkConsistent verifies the store-wide invariants: every block passes
// Check, no address is held twice, handles and block owners agree both
// ways, and affinity keys match the blocks' nodes. It returns the owner of
// every allocated address.
func checkConsistent(tb testing.TB, a *allocator.Allocator, s kv.Store) map[netip.Addr]string {
	tb.Helper()
	ctx := context.Background()
	blocks, err := a.Blocks(ctx, "")
	if err != nil {
		tb.Fatal(err)
	}
	owners := map[netip.Addr]string{}
	affinity := map[string]bool{}
	for _, b := range blocks {
		if probs := b.Check(); len(probs) > 0 {
			tb.Fatalf("block %s: %v", b.CIDR, probs)
		}
		for _, al := range b.Allocations() {
			if prev, dup := owners[al.Addr]; dup {
				tb.Fatalf("%s held by %s and %s", al.Addr, prev, al.Handle)
			}
			owners[al.Addr] = al.Handle
		}
		if b.Node != "" {
			affinity[allocator.AffinityKey(b.Node, b.Pool, b.CIDR)] = true
		}
	}
	stored := map[string]bool{}
	for _, e := range mustList(tb, s, "affinity/") {
		stored[e.Key] = true
		target := slices.IndexFunc(blocks, func(b ipam.Block) bool { return allocator.BlockKey(b.Pool, b.CIDR) == string(e.Value) })
		if !affinity[e.Key] || target < 0 {
			tb.Fatalf("affinity %s -> %s matches no block's node", e.Key, e.Value)
		}
	}
	for k := range affinity {
		if !stored[k] {
			tb.Fatalf("block with node has no affinity key %s", k)
		}
	}
	hs, err := a.Handles(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	held := map[netip.Addr]string{}
	for _, h := range hs {
		if len(h.IPs) == 0 {
			tb.Fatalf("handle %s has no addresses", h.ID)
		}
		for _, ip := range h.IPs {
			if owners[ip.Addr] != h.ID {
				tb.Fatalf("handle %s names %s, which its block gives to %q", h.ID, ip.Addr, owners[ip.Addr])
			}
			if !ip.Block.Contains(ip.Addr) {
				tb.Fatalf("handle %s: %s not in its block %s", h.ID, ip.Addr, ip.Block)
			}
			held[ip.Addr] = h.ID
		}
	}
	for ip, h := range owners {
		if held[ip] != h {
			tb.Fatalf("%s is held by %s in its block but no handle names it", ip, h)
		}
	}
	return owners
}

func mustList(tb testing.TB, s kv.Store, prefix string) []kv.KeyValue {
	tb.Helper()
	es, err := s.List(context.Background(), prefix)
	if err != nil {
		tb.Fatal(err)
	}
	return es
}
