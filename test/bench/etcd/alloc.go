package main

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"

	"github.com/ipkeeper/ipkeeper/test/bench/latency"
)

var handleSeq atomic.Int64

// allocRun is what an allocation measurement leaves behind: the allocator
// (with its memory of the node objects it wrote) and the handles it made,
// per node, so that the release-all measurement can undo them.
type allocRun struct {
	latency.Result
	alloc *allocator.Allocator
	mu    sync.Mutex
	ids   map[int][]string // node -> handle IDs
}

func nodeName(n int) string { return fmt.Sprintf("node-%04d", n) }

// allocBench allocates from c workers for d on the typed store s, worker
// w's i-th allocation on node (w+i*c) mod nodes. With locked, every worker
// uses one Allocator, whose per-node lock runs one allocation at a
// time per node, as the plugin's node lock makes it; without, each worker
// has its own allocator (as processes that do not take the node lock) and
// concurrent allocations on one node conflict on its object.
func allocBench(ctx context.Context, s store.Store, c, nodes int, locked bool, d time.Duration) *allocRun {
	run := &allocRun{alloc: allocator.New(s, nil), ids: map[int][]string{}}
	pool := ipam.Pool{Name: "bench", CIDR: netip.MustParsePrefix("10.0.0.0/12"), BlockSize: 26}
	if _, err := run.alloc.EnsurePool(ctx, pool); err != nil {
		log.Fatal(err)
	}
	allocs := make([]*allocator.Allocator, c)
	for w := range allocs {
		allocs[w] = run.alloc
		if !locked {
			allocs[w] = allocator.New(s, nil)
		}
	}
	run.Result = latency.Measure(c, d, func(w, i int) error {
		n := (w + i*c) % nodes
		cid := fmt.Sprintf("c%d", handleSeq.Add(1))
		id := ipam.HandleID("bench", cid, "eth0")
		_, err := allocs[w].Allocate(ctx, allocator.Request{
			Handle: ipam.Handle{ID: id, Node: nodeName(n), Network: "bench", ContainerID: cid, IfName: "eth0"},
			Sets:   [][]string{{"bench"}},
		})
		if err == nil {
			run.mu.Lock()
			run.ids[n] = append(run.ids[n], id)
			run.mu.Unlock()
		}
		return err
	})
	return run
}

// releaseAll releases every handle run made, from c workers, one node at a
// time per worker (as DELs on a node take turns under the plugin's node
// lock), with the allocator that made them, i.e. knowing the node objects
// it wrote last.
func releaseAll(ctx context.Context, run *allocRun, c int) latency.Result {
	type nodeIDs struct {
		node int
		ids  []string
	}
	var work []nodeIDs
	for n, ids := range run.ids {
		work = append(work, nodeIDs{n, ids})
	}
	var next atomic.Int64
	var mu sync.Mutex
	var lats []time.Duration
	var wg sync.WaitGroup
	start := time.Now()
	for range c {
		wg.Go(func() {
			var mine []time.Duration
			for {
				k := int(next.Add(1)) - 1
				if k >= len(work) {
					break
				}
				for _, id := range work[k].ids {
					t0 := time.Now()
					if _, err := run.alloc.Release(ctx, nodeName(work[k].node), id); err != nil {
						log.Printf("release %s: %v", id, err)
						continue
					}
					mine = append(mine, time.Since(t0))
				}
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return latency.Result{N: len(lats), Wall: time.Since(start), Lat: lats}
}
