package etcd_test

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/consistency"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
)

// Many nodes allocate at once from shared pools on the typed store kept in
// etcd (kvbacked, Allocator): 50 nodes with 8 concurrent allocators
// each, 4 000 allocations (one IPv4 and one IPv6 address each: 80 per
// node, so every node claims a second block of each pool while the others
// allocate and claim), then every one released. No address may be handed
// out twice, nothing may be left over, and the store must stay consistent.
// (Every allocation writes its node's whole object, JSON-encoded under
// -race on both sides of an etcd embedded in the test binary: 10 000
// allocations, 200 per node, took 14 minutes on the shared 2-core machine.)
func TestManyNodes(t *testing.T) {
	const nodes, perNode, total = 50, 8, 4000
	// 400 workers against an etcd embedded in this (possibly -race) test
	// binary on two cores: give requests room beyond the default timeout.
	s := kvbacked.New(open(t, func(c *etcd.Config) { c.RequestTimeout = time.Minute }))
	defer s.Close()
	a := allocator.New(s, nil)
	ctx := t.Context()
	for _, p := range []ipam.Pool{
		{Name: "v4", CIDR: netip.MustParsePrefix("10.64.0.0/16"), BlockSize: 26},
		{Name: "v6", CIDR: netip.MustParsePrefix("fd00:64::/112"), BlockSize: 122},
	} {
		if _, err := a.EnsurePool(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	var (
		next    atomic.Int64
		mu      sync.Mutex
		holder  = map[netip.Addr]string{}
		ids     []ipam.Handle
		wg      sync.WaitGroup
		errs    = make(chan error, nodes*perNode)
		latency = make([]time.Duration, total)
	)
	start := time.Now()
	for n := range nodes {
		node := fmt.Sprintf("node-%02d", n)
		for w := range perNode {
			wg.Go(func() {
				for {
					i := next.Add(1) - 1
					if i >= total {
						return
					}
					id := fmt.Sprintf("net.c%05d.eth0", i)
					t0 := time.Now()
					h, err := a.Allocate(ctx, allocator.Request{
						Handle: ipam.Handle{ID: id, Node: node, ContainerID: fmt.Sprint(i), IfName: "eth0", Network: "net"},
						Sets:   [][]string{{"v4"}, {"v6"}},
					})
					latency[i] = time.Since(t0)
					if err != nil {
						errs <- fmt.Errorf("%s worker %d: allocate %s: %w", node, w, id, err)
						return
					}
					mu.Lock()
					ids = append(ids, h)
					for _, ip := range h.IPs {
						if other, dup := holder[ip.Addr]; dup {
							errs <- fmt.Errorf("%s handed to %s and %s", ip.Addr, other, id)
						}
						holder[ip.Addr] = id
					}
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	elapsed := time.Since(start)
	if len(holder) != 2*total {
		t.Fatalf("%d distinct addresses for %d dual-stack allocations", len(holder), total)
	}
	rep, err := consistency.CheckStore(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Err(); err != nil {
		t.Fatal(err)
	}
	if rep.Counts.Handles != total || rep.Counts.Allocated != 2*total {
		t.Fatalf("after allocation: %d handles, %d allocated addresses; want %d and %d", rep.Counts.Handles, rep.Counts.Allocated, total, 2*total)
	}
	blocks := rep.Counts.Blocks
	if rep.Counts.Claims != blocks {
		t.Fatalf("after allocation: %d blocks held by node objects, %d claims", blocks, rep.Counts.Claims)
	}
	t.Logf("%d allocations from %d nodes x %d workers in %v (%.0f/s), %d blocks", total, nodes, perNode, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), blocks)

	work := make(chan ipam.Handle, len(ids))
	for _, h := range ids {
		work <- h
	}
	close(work)
	const releasers = 64
	errs = make(chan error, releasers)
	for range releasers {
		wg.Go(func() {
			for h := range work {
				freed, err := a.Release(ctx, h.Node, h.ID)
				if err != nil {
					errs <- fmt.Errorf("release %s: %w", h.ID, err)
					return
				}
				if len(freed) != 2 {
					errs <- fmt.Errorf("release %s freed %v, want 2 addresses", h.ID, freed)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	rep, err = consistency.CheckStore(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Err(); err != nil {
		t.Fatal(err)
	}
	if rep.Counts.Handles != 0 || rep.Counts.Allocated != 0 {
		t.Fatalf("leftovers after releasing everything: %d handles, %d allocated addresses", rep.Counts.Handles, rep.Counts.Allocated)
	}
	if blocks == 0 || rep.Counts.Blocks != blocks || rep.Counts.Claims != blocks {
		t.Fatalf("after release: %d blocks held by node objects and %d claims, want the %d claimed blocks with their claims", rep.Counts.Blocks, rep.Counts.Claims, blocks)
	}
}
