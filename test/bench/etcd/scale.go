package main

import (
	"context"
	"fmt"
	"log"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"

	"github.com/ipkeeper/ipkeeper/test/bench/latency"
)

// scaleBench measures ADD latency with 10 nodes and with flagNodes nodes of
// flagPods pods each already stored, in a /12 pool of /26 blocks. The
// stored state is written directly as typed objects (the pool, the
// blocks' claims and each node's object, as the allocator would have left
// them), then ADD+DEL pairs run on random nodes, one at a time; only the
// ADD is timed.
func scaleBench(ctx context.Context, open func(string, bool) *etcd.Store) {
	fmt.Printf("\n5. scale: ADD latency with N nodes x %d pods stored (/12 pool, /26 blocks), 300 ADD+DEL pairs on random nodes\n", *flagPods)
	fmt.Printf("   cold: a fresh allocator per ADD, as a plugin process (pool and node object read, one node object write)\n")
	fmt.Printf("   warm: an allocator that wrote the node's object last (one node object write)\n")
	fmt.Printf("%-8s %-5s %10s %10s %9s %9s %9s\n", "nodes", "mode", "addresses", "load time", "ADD p50", "ADD p90", "ADD p99")
	p50s := map[string][]time.Duration{}
	for _, n := range []int{10, *flagNodes} {
		s := kvbacked.New(open(fmt.Sprintf("/scale-%d", n), false))
		t0 := time.Now()
		addrs := preload(ctx, s, n, *flagPods)
		load := time.Since(t0)
		probes := make([]string, 300)
		for i := range probes {
			probes[i] = fmt.Sprintf("node-%05d", rand.N(n))
		}
		for _, mode := range []string{"cold", "warm"} {
			warm := allocator.New(s, nil)
			addDel := func(node, id string, fresh bool) time.Duration {
				a := warm
				if fresh {
					a = allocator.New(s, nil)
				}
				t1 := time.Now()
				_, err := a.Allocate(ctx, allocator.Request{Handle: ipam.Handle{ID: id, Node: node, Network: "scale", IfName: "eth0"}, Sets: [][]string{{"scale"}}})
				lat := time.Since(t1)
				if err != nil {
					log.Fatalf("scale ADD: %v", err)
				}
				if _, err := a.Release(ctx, node, id); err != nil {
					log.Fatalf("scale DEL: %v", err)
				}
				return lat
			}
			if mode == "warm" {
				for i, node := range probes {
					addDel(node, fmt.Sprintf("scale.warm%d.eth0", i), false)
				}
			}
			var lats []time.Duration
			for i, node := range probes {
				lats = append(lats, addDel(node, fmt.Sprintf("scale.probe%d.eth0", i), mode == "cold"))
			}
			r := latency.Result{N: len(lats), Lat: lats}
			p50s[mode] = append(p50s[mode], r.Pct(50))
			fmt.Printf("%-8d %-5s %10d %10s %9s %9s %9s\n", n, mode, addrs, load.Round(time.Second), latency.Ms(r.Pct(50)), latency.Ms(r.Pct(90)), latency.Ms(r.Pct(99)))
		}
		s.Close()
	}
	for _, mode := range []string{"cold", "warm"} {
		fmt.Printf("ADD p50 at %d nodes / at 10 nodes, %s: %.2f\n", *flagNodes, mode, float64(p50s[mode][1])/float64(p50s[mode][0]))
	}
}

// preload writes nodes x pods allocations through the typed store: the
// pool, then per node its blocks' claims and its object holding the
// blocks and one handle record per pod. It returns the addresses stored.
func preload(ctx context.Context, s store.Store, nodes, pods int) int {
	pool := ipam.Pool{Name: "scale", CIDR: netip.MustParsePrefix("10.0.0.0/12"), BlockSize: 26, Origin: "cli"}
	if _, err := s.CreatePool(ctx, store.Pool{Spec: pool}); err != nil {
		log.Fatal(err)
	}
	first, last := pool.BlockSpan()
	perNode := (pods + 63) / 64
	if uint64(nodes*perNode) > last-first+1 {
		log.Fatalf("scale: %d nodes need %d blocks, the pool has %d", nodes, nodes*perNode, last-first+1)
	}
	work := make(chan int, 64)
	var wg sync.WaitGroup
	var total int
	var mu sync.Mutex
	for range 8 {
		wg.Go(func() {
			for nd := range work {
				obj := store.Node{Name: fmt.Sprintf("node-%05d", nd)}
				left := pods
				for b := range perNode {
					cidr := pool.BlockAt(first + uint64(nd*perNode+b))
					if _, err := s.CreateClaim(ctx, store.Claim{BlockRef: store.BlockRef{Pool: pool.Name, CIDR: cidr}, Node: obj.Name}); err != nil {
						log.Fatalf("scale preload: %v", err)
					}
					blk := ipam.NewBlock(pool, cidr, obj.Name)
					for left > 0 {
						cid := fmt.Sprintf("%s-%d", obj.Name, left)
						id := ipam.HandleID("scale", cid, "eth0")
						nb, addr, err := blk.Assign(pool, id)
						if err != nil {
							break
						}
						blk = nb
						left--
						obj.Handles = append(obj.Handles, ipam.Handle{ID: id, Network: "scale", ContainerID: cid, IfName: "eth0", Node: obj.Name,
							Namespace: "default", Pod: fmt.Sprintf("pod-%d", left), Created: time.Now().UTC(),
							IPs: []ipam.HandleIP{{Addr: addr, Pool: pool.Name, Block: cidr}}})
					}
					obj.Blocks = append(obj.Blocks, blk)
				}
				if _, err := s.CreateNode(ctx, obj); err != nil {
					log.Fatalf("scale preload: %v", err)
				}
				mu.Lock()
				total += pods - left
				mu.Unlock()
			}
		})
	}
	for nd := range nodes {
		work <- nd
	}
	close(work)
	wg.Wait()
	return total
}
