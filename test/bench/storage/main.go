// Command storage measures allocation on the typed storage contract on its
// three backends in one run — a bbolt file, an embedded etcd and a
// kube-apiserver (the cached build; IPKEEPER_KUBE_APISERVER) — against the
// raw speed of the same etcd doing the same number of writes, so the
// ratios compare like with like:
//
//	IPKEEPER_KUBE_APISERVER=$(scripts/kube-apiserver.sh) go run ./test/bench/storage
//
// Each of -nodes workers is one node (a node's ADDs are serialized by its
// lock, as plugin processes are) running dual-stack ADD then DEL for -dur.
// "cold" makes a fresh allocator per operation (a plugin process: it
// reads what it needs); "warm" keeps one per node (a long-lived process
// such as a per-node agent: it writes at the version it last saw).
//
// The peer, "raw etcd", is what an ADD and a DEL of the typed store on
// etcd cost at least: each is one compare-and-swap of the node's key (a
// value of -raw-bytes) through ipkeeper's etcd client, read first in
// "cold" mode and written at the version it last wrote in "warm" mode,
// with no allocator and no typed encoding.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/netip"
	"os"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
	"github.com/ipkeeper/ipkeeper/internal/store/kube"
	"github.com/ipkeeper/ipkeeper/test/bench/latency"
)

var (
	flagNodes = flag.Int("nodes", 20, "nodes, one worker each")
	flagDur   = flag.Duration("dur", 5*time.Second, "duration of each cell")
	flagKube  = flag.Bool("kube", true, "measure the Kubernetes backend (needs the cached kube-apiserver)")
	flagRaw   = flag.Int("raw-bytes", 600, "bytes of the raw etcd peer's value (about a node object with one dual-stack handle)")
)

var (
	v4 = ipam.Pool{Name: "bench-v4", CIDR: netip.MustParsePrefix("10.64.0.0/12"), BlockSize: 26}
	v6 = ipam.Pool{Name: "bench-v6", CIDR: netip.MustParsePrefix("fd00:64::/64"), BlockSize: 122}
)

// allocatorOps is what the allocator and the raw peer offer the benchmark.
type allocatorOps struct {
	add func(ctx context.Context, req allocator.Request) error
	del func(ctx context.Context, node, id string) error
}

func main() {
	flag.Parse()
	log.SetFlags(0)
	ctx := context.Background()
	etcdSrv, err := etcdtest.Start("", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer etcdSrv.Close()
	var tmpDirs []string
	defer func() {
		for _, d := range tmpDirs {
			os.RemoveAll(d)
		}
	}()
	type backend struct {
		name string
		open func(prefix string) (store.Store, error)
	}
	backends := []backend{
		{"local", func(string) (store.Store, error) {
			dir, err := os.MkdirTemp("", "bench-storage-")
			if err != nil {
				return nil, err
			}
			tmpDirs = append(tmpDirs, dir)
			return datastore.Open(ctx, config.Datastore{Type: config.DatastoreLocal, Path: dir}, datastore.Options{})
		}},
		{"etcd", func(prefix string) (store.Store, error) {
			return datastore.Open(ctx, config.Datastore{Type: config.DatastoreEtcd, Endpoints: []string{etcdSrv.Endpoint}, Prefix: "/" + prefix}, datastore.Options{})
		}},
	}
	if *flagKube {
		srv, err := kubetest.StartMain()
		if err != nil {
			log.Fatalf("kube-apiserver: %v (run with -kube=false to skip it)", err)
		}
		defer srv.Stop()
		backends = append(backends, backend{"kubernetes", func(prefix string) (store.Store, error) {
			cfg := *srv.Config
			cfg.QPS, cfg.Burst = 1000, 1000
			return kube.NewForConfig(&cfg, prefix)
		}})
	}
	fmt.Printf("%-28s %-5s %9s %9s %9s\n", "allocator / backend", "mode", "ADD+DEL/s", "p50", "p99")
	results := map[string]latency.Result{}
	cell := 0
	row := func(name, mode string, ops func(node int) allocatorOps) {
		cell++
		r := run(ctx, cell, ops)
		results[name+"/"+mode] = r
		fmt.Printf("%-28s %-5s %9.1f %9s %9s\n", name, mode, r.Rate(), latency.Ms(r.Pct(50)), latency.Ms(r.Pct(99)))
	}
	// The raw peer on the same etcd.
	for _, mode := range []string{"cold", "warm"} {
		s, err := etcd.Open(ctx, etcd.Config{Endpoints: []string{etcdSrv.Endpoint}, Prefix: fmt.Sprintf("/raw-%s", mode)})
		if err != nil {
			log.Fatal(err)
		}
		last := make([]int64, *flagNodes)
		row("raw etcd", mode, func(node int) allocatorOps {
			cas := func(ctx context.Context, key string) error {
				if mode == "cold" || last[node] == 0 {
					e, err := s.Get(ctx, key)
					if err != nil {
						return err
					}
					last[node] = e[0].Version
				}
				v := make([]byte, *flagRaw)
				v[0] = byte(last[node])
				rev, err := kv.TxnRevision(ctx, s, []kv.Cond{{Key: key, Version: last[node]}}, []kv.Op{{Key: key, Value: v}})
				last[node] = rev
				return err
			}
			return allocatorOps{
				add: func(ctx context.Context, req allocator.Request) error { return cas(ctx, req.Handle.Node) },
				del: func(ctx context.Context, node, _ string) error { return cas(ctx, node) },
			}
		})
		s.Close()
	}
	for _, b := range backends {
		for _, mode := range []string{"cold", "warm"} {
			s, err := b.open(fmt.Sprintf("allocator-%s-%s", b.name, mode))
			if err != nil {
				log.Fatal(err)
			}
			setup := allocator.New(s, nil)
			for _, p := range []ipam.Pool{v4, v6} {
				if _, err := setup.EnsurePool(ctx, p); err != nil {
					log.Fatal(err)
				}
			}
			warm := make([]*allocator.Allocator, *flagNodes)
			row("allocator / "+b.name, mode, func(node int) allocatorOps {
				a := warm[node]
				if a == nil || mode == "cold" {
					a = allocator.New(s, nil)
					warm[node] = a
				}
				return allocatorOps{
					add: func(ctx context.Context, req allocator.Request) error { _, err := a.Allocate(ctx, req); return err },
					del: func(ctx context.Context, node, id string) error { _, err := a.Release(ctx, node, id); return err },
				}
			})
			s.Close()
		}
	}
	fmt.Println()
	for _, mode := range []string{"cold", "warm"} {
		base := results["raw etcd/"+mode]
		for _, name := range []string{"allocator / local", "allocator / etcd", "allocator / kubernetes"} {
			r, ok := results[name+"/"+mode]
			if !ok {
				continue
			}
			fmt.Printf("%-5s %-22s / raw etcd: throughput %.2fx, p50 %.2fx\n", mode, name, r.Rate()/base.Rate(),
				float64(r.Pct(50))/float64(base.Pct(50)))
		}
	}
}

// run measures dual-stack ADD then DEL pairs, one worker per node, and
// returns the latencies of the pairs.
func run(ctx context.Context, cell int, ops func(node int) allocatorOps) latency.Result {
	return latency.Measure(*flagNodes, *flagDur, func(w, i int) error {
		node := fmt.Sprintf("node-%d", w)
		c := fmt.Sprintf("c%d-%d-%d", cell, w, i)
		req := allocator.Request{
			Handle: ipam.Handle{ID: ipam.HandleID("k8s", c, "eth0"), Network: "k8s", ContainerID: c, IfName: "eth0",
				Node: node, Namespace: "default", Pod: "pod-" + c, PodUID: "uid-" + c},
			Sets: [][]string{{v4.Name}, {v6.Name}},
		}
		o := ops(w)
		if err := o.add(ctx, req); err != nil {
			return err
		}
		return ops(w).del(ctx, node, req.Handle.ID)
	})
}
