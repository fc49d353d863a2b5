package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"

	"github.com/ipkeeper/ipkeeper/test/bench/latency"
)

// scaleBench measures ADD latency with 10 nodes and with flagNodes nodes of
// flagPods pods each already stored, in a /12 pool of /26 blocks. The
// stored state is written directly (what the allocator would have
// written), then ADD+DEL pairs run on random nodes, one at a time; only
// the ADD is timed.
func scaleBench(ctx context.Context, ep string, cli *clientv3.Client, open func(string, bool) *etcd.Store) {
	fmt.Printf("\n5. scale: ADD latency with N nodes x %d pods stored (/12 pool, /26 blocks), 300 ADD+DEL pairs on random nodes\n", *flagPods)
	fmt.Printf("   cold: no hint (a node's first ADD: handle+pool read, affinity list, block read, txn)\n")
	fmt.Printf("   warm: the node's hint from its previous ADD, as its plugin keeps it (one txn)\n")
	fmt.Printf("%-8s %-5s %10s %10s %9s %9s %9s\n", "nodes", "hint", "addresses", "load time", "ADD p50", "ADD p90", "ADD p99")
	p50s := map[string][]time.Duration{}
	for _, n := range []int{10, *flagNodes} {
		prefix := fmt.Sprintf("/scale-%d", n)
		t0 := time.Now()
		addrs := preload(ctx, cli, prefix, n, *flagPods)
		load := time.Since(t0)
		s := open(prefix, false)
		probes := make([]string, 300)
		for i := range probes {
			probes[i] = fmt.Sprintf("node-%05d", rand.N(n))
		}
		for _, mode := range []string{"cold", "warm"} {
			a := allocator.New(s, nil)
			addDel := func(node, id string, fresh bool) time.Duration {
				if fresh {
					a.SetHints(&allocator.MemoryHints{})
				}
				t1 := time.Now()
				_, err := a.Allocate(ctx, allocator.Request{Handle: ipam.Handle{ID: id, Node: node, Network: "scale", IfName: "eth0"}, Sets: [][]string{{"scale"}}})
				lat := time.Since(t1)
				if err != nil {
					log.Fatalf("scale ADD: %v", err)
				}
				if _, err := a.Release(ctx, id); err != nil {
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

// preload writes nodes x pods allocations: per node two claimed blocks with
// their affinities and one handle per pod, plus the pool.
func preload(ctx context.Context, cli *clientv3.Client, prefix string, nodes, pods int) int {
	pool := ipam.Pool{Name: "scale", CIDR: netip.MustParsePrefix("10.0.0.0/12"), BlockSize: 26, Origin: "cli"}
	key := func(k string) string { return prefix + "/" + k }
	mustJSON := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			log.Fatal(err)
		}
		return string(b)
	}
	if _, err := cli.Put(ctx, key(allocator.PoolKey(pool.Name)), mustJSON(pool)); err != nil {
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
				node := fmt.Sprintf("node-%05d", nd)
				var ops []clientv3.Op
				left := pods
				for b := range perNode {
					cidr := pool.BlockAt(first + uint64(nd*perNode+b))
					blk := ipam.NewBlock(pool, cidr, node)
					for left > 0 {
						cid := fmt.Sprintf("%s-%d", node, left)
						id := ipam.HandleID("scale", cid, "eth0")
						nb, addr, err := blk.Assign(pool, id)
						if err != nil {
							break
						}
						blk = nb
						left--
						h := ipam.Handle{ID: id, Network: "scale", ContainerID: cid, IfName: "eth0", Node: node,
							Namespace: "default", Pod: fmt.Sprintf("pod-%d", left), Created: time.Now().UTC(),
							IPs: []ipam.HandleIP{{Addr: addr, Pool: pool.Name, Block: cidr}}}
						ops = append(ops, clientv3.OpPut(key(allocator.HandleKey(id)), mustJSON(h)))
					}
					ops = append(ops, clientv3.OpPut(key(allocator.BlockKey(pool.Name, cidr)), mustJSON(blk)),
						clientv3.OpPut(key(allocator.AffinityKey(node, pool.Name, cidr)), allocator.BlockKey(pool.Name, cidr)))
				}
				mu.Lock()
				total += pods - left
				mu.Unlock()
				for len(ops) > 0 {
					k := min(len(ops), 120)
					if _, err := cli.Txn(ctx).Then(ops[:k]...).Commit(); err != nil {
						log.Fatalf("scale preload: %v", err)
					}
					ops = ops[k:]
				}
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
