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
)

// Many nodes allocate at once from shared pools in etcd: 50 nodes with 8
// concurrent allocators each, 10 000 allocations (one IPv4 and one IPv6
// address each), then every one released. No address may be handed out
// twice, nothing may be left over, and the store must stay consistent.
func TestManyNodes(t *testing.T) {
	const nodes, perNode, total = 50, 8, 10000
	// 400 workers against an etcd embedded in this (possibly -race) test
	// binary on two cores: give requests room beyond the default timeout.
	s := open(t, func(c *etcd.Config) { c.RequestTimeout = time.Minute })
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
		ids     []string
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
					ids = append(ids, id)
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
	rep, err := consistency.Check(ctx, s)
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
	t.Logf("%d allocations from %d nodes x %d workers in %v (%.0f/s), %d blocks", total, nodes, perNode, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), blocks)

	work := make(chan string, len(ids))
	for _, id := range ids {
		work <- id
	}
	close(work)
	const releasers = 64
	errs = make(chan error, releasers)
	for range releasers {
		wg.Go(func() {
			for id := range work {
				freed, err := a.Release(ctx, id)
				if err != nil {
					errs <- fmt.Errorf("release %s: %w", id, err)
					return
				}
				if len(freed) != 2 {
					errs <- fmt.Errorf("release %s freed %v, want 2 addresses", id, freed)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	rep, err = consistency.Check(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Err(); err != nil {
		t.Fatal(err)
	}
	if rep.Counts.Handles != 0 || rep.Counts.Allocated != 0 {
		t.Fatalf("leftovers after releasing everything: %d handles, %d allocated addresses", rep.Counts.Handles, rep.Counts.Allocated)
	}
	if rep.Counts.Blocks != blocks || rep.Counts.Affinities != blocks {
		t.Fatalf("after release: %d blocks and %d affinities, want the %d claimed blocks with their affinities", rep.Counts.Blocks, rep.Counts.Affinities, blocks)
	}
}
