// Command kubestore measures what a Kubernetes datastore for ipkeeper
// would cost, against a real kube-apiserver, next to ipkeeper's etcd
// backend in the same run, to decide the storage contract's unit of
// atomicity (docs/STORAGE.md). It installs prototype CRDs of its own
// (group ipkeeper.io: ProtoBlock, one block with self-describing owner
// records; ProtoNode, all of one node's blocks and handles) and prints:
//
//  1. object sizes: a full /26 and a full /122 block with handle and pod
//     owner records, a node object of 110 dual-stack pods, as spec JSON,
//     as stored (GET) and the managedFields part of that;
//  2. compare-and-swap updates (PUT with resourceVersion, or a JSON merge
//     patch carrying it) at concurrency 1, 8 and 64 over -nodes nodes, one
//     object per node (block, or node object dual-stack) against all
//     nodes in one object, with conflicts per operation, and the same
//     pattern on ipkeeper's etcd backend (embedded etcd);
//  3. the update latency as the object grows (conc 1, one node);
//  4. create-if-absent (absent, existing) and preconditioned delete;
//  5. a label-selector LIST of one node's objects among -list-nodes
//     nodes' objects, next to a GET and a LIST of all;
//  6. process cold start: tiny binaries exec'd -cold times each, one GET
//     through a client-go clientset, a dynamic client, plain net/http, or
//     a unix socket to an agent that keeps the connection warm.
//
// Numbers are printed, never asserted. The kube-apiserver comes from
// $IPKEEPER_KUBE_APISERVER or scripts/kube-apiserver.sh's cache.
//
//	IPKEEPER_KUBE_APISERVER=$(scripts/kube-apiserver.sh) go run ./test/bench/kubestore [-dur 3s] [-nodes 20] [-list-nodes 1000] [-cold 30]
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"

	"github.com/ipkeeper/ipkeeper/test/bench/latency"
)

var (
	flagDur       = flag.Duration("dur", 3*time.Second, "duration of each throughput cell")
	flagNodes     = flag.Int("nodes", 20, "nodes in the compare-and-swap measurement")
	flagLo        = flag.Int("lo", 24, "handles per node kept at least (CAS measurement)")
	flagHi        = flag.Int("hi", 40, "handles per node kept at most (CAS measurement; at most 64)")
	flagListNodes = flag.Int("list-nodes", 1000, "nodes (2 block objects each) in the LIST measurement")
	flagSamples   = flag.Int("samples", 200, "sequential samples of each create/delete/list/get latency")
	flagCold      = flag.Int("cold", 30, "execs of each cold-start binary")
	flagSkipCold  = flag.Bool("skip-cold", false, "skip the cold-start measurement")
	flagSkipList  = flag.Bool("skip-list", false, "skip the create/list measurements")
)

func main() {
	flag.Parse()
	log.SetFlags(0)
	if *flagHi > 64 || *flagLo < 0 || *flagLo >= *flagHi || *flagNodes < 1 || *flagListNodes < 1 {
		log.Fatalf("need 0 <= -lo < -hi <= 64, -nodes and -list-nodes >= 1")
	}
	ctx := context.Background()
	root, err := kubetest.ModuleRoot()
	if err != nil {
		log.Fatal(err)
	}
	tmp, err := os.MkdirTemp("", "kubestore-bench-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(tmp)

	t0 := time.Now()
	srv, err := kubetest.StartMain()
	if err != nil {
		log.Fatalf("start kube-apiserver (set IPKEEPER_KUBE_APISERVER=$(scripts/kube-apiserver.sh)): %v", err)
	}
	defer srv.Stop()
	es, err := etcdtest.Start(filepath.Join(tmp, "etcd"), nil)
	if err != nil {
		log.Fatalf("start embedded etcd: %v", err)
	}
	defer es.Close()
	if err := srv.Apply(ctx, false, crds()...); err != nil {
		log.Fatal(err)
	}
	rc, err := newREST(srv.Config)
	if err != nil {
		log.Fatal(err)
	}
	k := &kubeStore{rc: rc}
	kp := &kubeStore{rc: rc, patch: true}
	est, err := etcd.Open(ctx, etcd.Config{Endpoints: []string{es.Endpoint}, Prefix: "/kubestore"})
	if err != nil {
		log.Fatal(err)
	}
	defer est.Close()
	e := &etcdStore{s: est}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("kube-apiserver %s (its etcd embedded in this process) and ipkeeper's etcd backend on an embedded etcd, up with CRDs in %v\n",
		srv.URL, time.Since(t0).Round(time.Millisecond))
	fmt.Printf("machine: %d CPUs, GOMAXPROCS %d, load average at start %s", runtime.NumCPU(), runtime.GOMAXPROCS(0), load)
	fmt.Printf("scale: CAS %d nodes, %d..%d handles per node, %v per cell; LIST %d nodes x 2 objects; %d samples; %d execs per cold-start binary\n",
		*flagNodes, *flagLo, *flagHi, *flagDur, *flagListNodes, *flagSamples, *flagCold)

	fmt.Printf("\n1. object sizes (JSON bytes)\n")
	if err := sizes(ctx, k); err != nil {
		log.Fatal(err)
	}

	fmt.Printf("\n2. compare-and-swap update, one node at a time per node, each node keeping its own copy; %v per cell\n", *flagDur)
	fmt.Printf("%-44s %4s | %9s %8s %8s %7s | %9s %8s %8s %7s | %6s\n", "mode", "conc",
		"kube/s", "p50", "p99", "confl", "etcd/s", "p50", "p99", "confl", "ratio")
	type row struct {
		m     casMode
		kube  *kubeStore
		label string
	}
	rows := []row{
		{casModes[0], k, casModes[0].name},
		{casModes[1], k, casModes[1].name},
		{casModes[1], kp, "node, as JSON merge patch + resourceVersion"},
		{casModes[2], k, casModes[2].name},
	}
	for ri, r := range rows {
		for _, conc := range []int{1, 8, 64} {
			if r.m.shared && conc > 8 {
				fmt.Printf("%-44s %4d | not run: at concurrency 8 every operation already waits seconds behind conflicts\n", r.label, conc)
				continue
			}
			prefix := fmt.Sprintf("r%dc%d-", ri, conc)
			kc, err := setup(ctx, r.kube, r.m, *flagNodes, 1, *flagLo, *flagHi, prefix)
			if err != nil {
				log.Fatalf("%s: %v", r.label, err)
			}
			kr := kc.run(ctx, conc, *flagDur)
			ec, err := setup(ctx, e, r.m, *flagNodes, 1, *flagLo, *flagHi, prefix)
			if err != nil {
				log.Fatal(err)
			}
			er := ec.run(ctx, conc, *flagDur)
			fmt.Printf("%-44s %4d | %9.0f %8s %8s %7.3f | %9.0f %8s %8s %7.3f | %6.2f\n", r.label, conc,
				kr.Rate(), latency.Ms(kr.Pct(50)), latency.Ms(kr.Pct(99)), perOp(kc.conflicts.Load(), kr.N),
				er.Rate(), latency.Ms(er.Pct(50)), latency.Ms(er.Pct(99)), perOp(ec.conflicts.Load(), er.N), kr.Rate()/er.Rate())
		}
	}
	fmt.Printf("(confl = failed compare-and-swaps per successful operation; ratio = kube ops/s / etcd ops/s)\n")

	fmt.Printf("\n3. update latency by object size: 1 node, concurrency 1, %v per cell\n", *flagDur)
	fmt.Printf("%-52s %9s | %9s %8s %8s | %9s %8s %8s\n", "object", "spec B", "kube/s", "p50", "p99", "etcd/s", "p50", "p99")
	sweep := []struct {
		what           string
		m              casMode
		kube           *kubeStore
		blocks, lo, hi int
	}{
		{"block, 1..2 owners", casModes[0], k, 1, 1, 2},
		{"block, 62..63 owners (full /26)", casModes[0], k, 1, 62, 63},
		{"block, 62..63 handle-ID-only owners (today's Block)", casMode{"", resBlock, false, true}, k, 1, 62, 63},
		{"node, 1..2 dual-stack handles", casModes[1], k, 1, 1, 2},
		{"node, 109..110 dual-stack handles (2+2 blocks)", casModes[1], k, 2, 109, 110},
		{"node, 109..110 handles, JSON merge patch", casModes[1], kp, 2, 109, 110},
	}
	for si, s := range sweep {
		prefix := fmt.Sprintf("s%d-", si)
		kc, err := setup(ctx, s.kube, s.m, 1, s.blocks, s.lo, s.hi, prefix)
		if err != nil {
			log.Fatalf("%s: %v", s.what, err)
		}
		size := jsonLen(kc.views[0].spec)
		kr := kc.run(ctx, 1, *flagDur)
		ec, err := setup(ctx, e, s.m, 1, s.blocks, s.lo, s.hi, prefix)
		if err != nil {
			log.Fatal(err)
		}
		er := ec.run(ctx, 1, *flagDur)
		fmt.Printf("%-52s %9d | %9.0f %8s %8s | %9.0f %8s %8s\n", s.what, size, kr.Rate(), latency.Ms(kr.Pct(50)), latency.Ms(kr.Pct(99)), er.Rate(), latency.Ms(er.Pct(50)), latency.Ms(er.Pct(99)))
	}

	if !*flagSkipList {
		if err := listBench(ctx, k, *flagListNodes, *flagSamples); err != nil {
			log.Fatal(err)
		}
	}
	if !*flagSkipCold {
		fmt.Printf("\n6. process cold start: one GET of a full /26 ProtoBlock per exec, %d execs each in a row\n", *flagCold)
		if err := coldBench(ctx, k, srv.AdminKubeconfig, "size-"+objName(netip.MustParsePrefix("10.250.0.0/26")), root, tmp, *flagCold); err != nil {
			log.Fatal(err)
		}
	}
	load, _ = os.ReadFile("/proc/loadavg")
	fmt.Printf("\ndone in %v; load average at end %s", time.Since(t0).Round(time.Second), strings.TrimSpace(string(load))+"\n")
}

func perOp(n int64, ops int) float64 { return float64(n) / float64(max(ops, 1)) }
