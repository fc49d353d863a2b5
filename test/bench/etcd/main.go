// Command etcd-bench measures ipkeeper's etcd datastore against the raw
// speed of the same etcd, in one run, and prints a table:
//
//  1. the raw ceiling: single-key compare-and-swap transactions on distinct
//     keys through etcd's Go client (gRPC) and through ipkeeper's JSON
//     gateway client, at concurrency 1, 8 and 64;
//  2. ipkeeper allocations/s with p50/p99 at the same concurrencies,
//     spread over 50 nodes (one allocation at a time per node, as the
//     plugin's node lock makes it), by allocator.Allocator on the
//     typed store kept in etcd (kvbacked), then the release of them all;
//  3. one hot node with 16 concurrent allocations, without the node lock
//     (16 allocators, each writing at the node object's version it last
//     saw) and with it (one allocator, whose per-node lock serializes);
//  4. the ipkeeper binary as a process: sequential ADDs on one node and 16
//     concurrent ADD processes, next to host-local ADDs on local disk;
//  5. with -scale: ADD p50 with 10 nodes and with 5 000 nodes of 110 pods
//     each (550 000 addresses in a /12 pool) already in the store.
//
// It starts an embedded etcd unless -endpoint names one. Numbers are
// printed, never asserted.
//
//	go run ./test/bench/etcd [-dur 3s] [-seq 500] [-scale]
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"

	"github.com/ipkeeper/ipkeeper/test/bench/latency"
)

var (
	flagEndpoint  = flag.String("endpoint", "", "etcd client URL to use instead of an embedded etcd")
	flagDur       = flag.Duration("dur", 3*time.Second, "duration of each throughput measurement")
	flagSeq       = flag.Int("seq", 500, "sequential ADD processes per plugin")
	flagConc      = flag.Int("conc-total", 320, "ADD processes in the 16-concurrent process run")
	flagIpkeeper  = flag.String("ipkeeper", "", "ipkeeper binary (default: go build ./cmd/ipkeeper)")
	flagHostLocal = flag.String("host-local", "", "host-local binary (default: .tools/bin/host-local, else go install)")
	flagBaseline  = flag.String("baseline", "", "an earlier ipkeeper build (scripts/baseline-plugin.sh COMMIT) whose processes run next to the current ones, with ratios")
	flagScale     = flag.Bool("scale", false, "also run the 5 000-node scale measurement")
	flagNodes     = flag.Int("scale-nodes", 5000, "nodes in the scale measurement")
	flagPods      = flag.Int("scale-pods", 110, "pods per node in the scale measurement")
	flagSkipProc  = flag.Bool("skip-proc", false, "skip the process measurements")
	flagCPUProf   = flag.String("cpuprofile", "", "write a CPU profile of the whole run (embedded etcd included) to this file")
)

func main() {
	flag.Parse()
	log.SetFlags(0)
	if *flagCPUProf != "" {
		f, err := os.Create(*flagCPUProf)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	ctx := context.Background()
	ep := *flagEndpoint
	if ep == "" {
		s, err := etcdtest.Start("", nil)
		if err != nil {
			log.Fatalf("start embedded etcd: %v", err)
		}
		defer s.Close()
		ep = s.Endpoint
		fmt.Printf("embedded etcd at %s (data in %s)\n", ep, s.Dir)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	open := func(prefix string, serial bool) *etcd.Store {
		s, err := etcd.Open(ctx, etcd.Config{Endpoints: []string{ep}, Prefix: prefix, Serializable: serial})
		if err != nil {
			log.Fatal(err)
		}
		return s
	}

	concs := []int{1, 8, 64}
	fmt.Printf("\n1-2. throughput, %v per cell (ratio = ipkeeper allocations/s / raw gRPC CAS txns/s)\n", *flagDur)
	fmt.Printf("%-5s %12s %12s %12s %9s %9s %9s %7s %10s\n", "conc", "raw gRPC/s", "raw JSON/s", "alloc/s", "p50", "p99", "retries", "ratio", "ratio/JSON")
	for _, c := range concs {
		rawG := latency.Measure(c, *flagDur, func(w, i int) error {
			k := fmt.Sprintf("/raw-grpc/%d/%d/%d", c, w, i)
			r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", 0)).Then(clientv3.OpPut(k, "v")).Commit()
			if err == nil && !r.Succeeded {
				err = store.ErrConflict
			}
			return err
		})
		js := open(fmt.Sprintf("/raw-json-%d", c), false)
		rawJ := latency.Measure(c, *flagDur, func(w, i int) error {
			k := fmt.Sprintf("%d/%d", w, i)
			return js.Txn(ctx, []kv.Cond{{Key: k, Version: 0}}, []kv.Op{{Key: k, Value: []byte("v")}})
		})
		js.Close()
		cs := &countingStore{Store: open(fmt.Sprintf("/alloc-%d", c), false)}
		al := allocBench(ctx, kvbacked.New(cs), c, 50, true, *flagDur)
		fmt.Printf("%-5d %12.0f %12.0f %12.0f %9s %9s %9.3f %7.2f %10.2f\n", c, rawG.Rate(), rawJ.Rate(), al.Rate(),
			latency.Ms(al.Pct(50)), latency.Ms(al.Pct(99)), float64(cs.conflicts.Load())/float64(max(al.N, 1)), al.Rate()/rawG.Rate(), al.Rate()/rawJ.Rate())
		reads0, txns0 := cs.reads.Load(), cs.txns.Load()
		rel := releaseAll(ctx, al, c)
		cs.Close()
		fmt.Printf("%-5s %12s %12s %12.0f %9s %9s %9s %7s %10s  release all: %.2f reads + %.2f txns per release\n", "", "", "", rel.Rate(),
			latency.Ms(rel.Pct(50)), latency.Ms(rel.Pct(99)), "", "", "",
			float64(cs.reads.Load()-reads0)/float64(max(rel.N, 1)), float64(cs.txns.Load()-txns0)/float64(max(rel.N, 1)))
		ss := &countingStore{Store: open(fmt.Sprintf("/alloc-serial-%d", c), true)}
		as := allocBench(ctx, kvbacked.New(ss), c, 50, true, *flagDur)
		ss.Close()
		fmt.Printf("%-5s %12s %12s %12.0f %9s %9s %9.3f %7.2f %10.2f  (serializable reads)\n", "", "", "", as.Rate(),
			latency.Ms(as.Pct(50)), latency.Ms(as.Pct(99)), float64(ss.conflicts.Load())/float64(max(as.N, 1)), as.Rate()/rawG.Rate(), as.Rate()/rawJ.Rate())
	}

	fmt.Printf("\n3. hot node: 16 concurrent allocations on one node, %v each\n", *flagDur)
	fmt.Printf("%-22s %10s %9s %9s %14s\n", "", "alloc/s", "p50", "p99", "conflicts/alloc")
	for _, locked := range []bool{false, true} {
		name := "no node lock"
		if locked {
			name = "node lock (as plugin)"
		}
		cs := &countingStore{Store: open(fmt.Sprintf("/hot-%v", locked), false)}
		r := allocBench(ctx, kvbacked.New(cs), 16, 1, locked, *flagDur)
		cs.Close()
		fmt.Printf("%-22s %10.0f %9s %9s %14.3f\n", name, r.Rate(), latency.Ms(r.Pct(50)), latency.Ms(r.Pct(99)), float64(cs.conflicts.Load())/float64(max(r.N, 1)))
	}

	if !*flagSkipProc {
		procBench(ctx, ep)
	}
	if *flagScale {
		scaleBench(ctx, open)
	}
}

// countingStore counts round trips and conflicting transactions of the
// etcd backend under the typed store (kvbacked.New(countingStore)).
type countingStore struct {
	*etcd.Store
	conflicts, reads, txns atomic.Int64
}

// Get counts a read round trip.
func (c *countingStore) Get(ctx context.Context, keys ...string) ([]kv.KeyValue, error) {
	c.reads.Add(1)
	return c.Store.Get(ctx, keys...)
}

// List counts a read round trip.
func (c *countingStore) List(ctx context.Context, prefix string) ([]kv.KeyValue, error) {
	c.reads.Add(1)
	return c.Store.List(ctx, prefix)
}

// TxnRevision counts a transaction (the typed store writes through it).
func (c *countingStore) TxnRevision(ctx context.Context, conds []kv.Cond, ops []kv.Op) (int64, error) {
	c.txns.Add(1)
	r, err := c.Store.TxnRevision(ctx, conds, ops)
	if err != nil && strings.Contains(err.Error(), store.ErrConflict.Error()) {
		c.conflicts.Add(1)
	}
	return r, err
}

// Txn counts a transaction.
func (c *countingStore) Txn(ctx context.Context, conds []kv.Cond, ops []kv.Op) error {
	c.txns.Add(1)
	err := c.Store.Txn(ctx, conds, ops)
	if err != nil && strings.Contains(err.Error(), store.ErrConflict.Error()) {
		c.conflicts.Add(1)
	}
	return err
}

// moduleRoot finds the directory holding go.mod.
func moduleRoot() string {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		log.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

func mustTemp() string {
	d, err := os.MkdirTemp("", "etcd-bench-")
	if err != nil {
		log.Fatal(err)
	}
	return d
}
