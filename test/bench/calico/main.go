// Command calico-bench measures ipkeeper's allocator against Calico's IPAM
// library on one embedded etcd, in one run, and prints a table.
//
// Both sides allocate one IPv4 address per ADD from a /12 pool of /26
// blocks, one ADD at a time per node (ipkeeper's allocator's node lock,
// Calico's CNI plugin's host-wide IPAM lock), each under its own key
// prefix, with the handle records their plugins write. ipkeeper goes
// through the datastore open path of its plugin (datastore.Open) and
// allocator.Allocator; Calico through libcalico-go's clientv3 on its
// etcdv3 backend, in a process of its own (test/bench/calico/side, a
// module of its own, built by its build.sh; -calico names the binary).
// Without -calico only ipkeeper's side runs.
//
// Workloads, interleaved (each side in turn, the first alternating):
//
//	W1  1 node, 2 000 ADDs in a row
//	W2  1 node, 4 000 ADDs, 16 at once
//	W3  50 nodes x 4 at once, 10 000 ADDs
//	W4  release everything W1-W3 made, 16 nodes at once
//	raw etcd compare-and-swap txns on distinct keys, 1 client
//	density: ADD p50 and bytes per ADD with 10, 100, 500 and 2 000 pods
//	already on a fresh node (-window ADDs in a row at each)
//
// Per side and workload it prints the rate, errors, ADD p50, the value
// bytes of the puts under the side's prefix per ADD (history replayed
// through a watch), and etcd's database growth per 1 000 operations
// (etcd's reported total size; history is not compacted during a
// workload, and is compacted and defragmented between workloads).
// Numbers are printed, never asserted.
//
// With -kube it measures the Kubernetes datastore instead: one real
// kube-apiserver (internal/kubetest: its etcd in this process, the
// project's CRDs and RBAC of deploy/) with Calico's CRDs
// (libcalico-go/config/crd, crd.projectcalico.org/v1) applied beside
// them; ipkeeper's store (internal/store/kube) and a new allocator per ADD
// (which, as a plugin process, remembers no node object) on one side,
// Calico's library on its Kubernetes backend (calicoside) on the other,
// each through a counting proxy of its own. At each density of -kube-pods
// (pods already on one fresh node, filled unmeasured), interleaved, it
// makes -window dual-stack ADDs in a row, one at a time, and prints per
// side the ADD p50, the bytes the API server stored per ADD (each object
// a POST, PUT or PATCH of the ADD wrote, GET back whole as JSON,
// managedFields included, once per write), the bytes of the request
// bodies the side sent, and its write and read requests per ADD.
//
//	go run ./test/bench/calico [-calico BIN] [-scale 1] [-window 50]
//	IPKEEPER_KUBE_APISERVER=$(scripts/kube-apiserver.sh) \
//	  go run ./test/bench/calico -kube [-calico BIN] [-calico-crds DIR] [-kube-pods 10,100,500,2000] [-window 50]
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/test/bench/latency"
)

var (
	flagCalico = flag.String("calico", "", "calicoside binary (test/bench/calico/side/build.sh); empty: ipkeeper's side only")
	flagScale  = flag.Float64("scale", 1, "multiplies the ADD counts of W1-W3 (0.1 for a quick run)")
	flagWindow = flag.Int("window", 50, "ADDs in a row measured at each density")
	flagRawDur = flag.Duration("raw", 3*time.Second, "duration of the raw compare-and-swap measurement")
	flagPrefix = flag.String("prefix", "/ipkeeper", "ipkeeper's etcd key prefix")
	flagKube   = flag.Bool("kube", false, "measure the Kubernetes datastore (a real kube-apiserver) instead of etcd")
	flagCRDs   = flag.String("calico-crds", "", "Calico's CRD directory for -kube (default: src/libcalico-go/config/crd beside the -calico binary)")
	flagWarm   = flag.Bool("kube-warm", false, "-kube: one allocator for every ADD of ipkeeper's side (remembering the node object it wrote, as a long-lived caller) instead of one per ADD")
	flagPods   = flag.String("kube-pods", "10,100,500,2000", "densities (pods already on the node) of -kube")
)

// workload is one row of the table.
type workload struct {
	name, what string
	spec       addSpec
	release    bool
}

func workloads(scale float64) []workload {
	n := func(x int) int { return max(1, int(float64(x)*scale)) }
	w3 := make([]string, 50)
	for i := range w3 {
		w3[i] = fmt.Sprintf("w3-node-%02d", i)
	}
	return []workload{
		{name: "W1", what: fmt.Sprintf("1 node, %d ADDs in a row", n(2000)), spec: addSpec{Nodes: []string{"w1-node"}, Conc: 1, N: n(2000), NS: "w1"}},
		{name: "W2", what: fmt.Sprintf("1 node, %d ADDs, 16 at once", n(4000)), spec: addSpec{Nodes: []string{"w2-node"}, Conc: 16, N: n(4000), NS: "w2"}},
		{name: "W3", what: fmt.Sprintf("50 nodes x 4 at once, %d ADDs", n(10000)), spec: addSpec{Nodes: w3, Conc: 200, N: n(10000), NS: "w3"}},
		{name: "W4", what: "release all (16 nodes at once)", spec: addSpec{Conc: 16}, release: true},
	}
}

// densities are the pod counts on a node at which ADDs are measured.
var densities = []int{10, 100, 500, 2000}

func main() {
	flag.Parse()
	log.SetFlags(0)
	ctx := context.Background()
	if *flagKube {
		pods, err := parseDensities(*flagPods)
		if err != nil {
			log.Fatal(err)
		}
		crds := *flagCRDs
		if crds == "" && *flagCalico != "" {
			crds = defaultCRDDir(*flagCalico)
		}
		if err := runKube(ctx, *flagCalico, crds, pods, *flagWindow, *flagWarm); err != nil {
			log.Fatal(err)
		}
		return
	}

	lockDir, err := os.MkdirTemp("", "calico-bench-lock-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(lockDir)
	if err := os.Setenv(datastore.LockDirEnv, lockDir); err != nil {
		log.Fatal(err)
	}
	srv, err := startEtcd()
	if err != nil {
		log.Fatalf("start embedded etcd: %v", err)
	}
	defer srv.close()
	fmt.Printf("calico-bench %s: embedded etcd %s at %s, pool %s of /%d blocks\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), srv.version(ctx), srv.ep, poolCIDR, blockSize)

	ipk, err := newIpkeeperSide(ctx, srv.ep, *flagPrefix)
	if err != nil {
		log.Fatal(err)
	}
	defer ipk.close()
	sides := []side{ipk}
	var cal *calicoSide
	if *flagCalico == "" {
		fmt.Println("calico: not run (no -calico binary; `make bench-calico CALICO_SRC=...` builds one)")
	} else if cal, err = startCalico(ctx, *flagCalico, srv.ep); err != nil {
		log.Fatalf("calico side: %v", err)
	} else {
		defer cal.close()
		fmt.Printf("calico: libcalico-go IPAM %s (etcdv3 backend, its own process)\n", cal.version)
		sides = []side{cal, ipk}
	}
	if err := srv.compact(ctx); err != nil {
		log.Fatal(err)
	}

	var tbl table
	for i, w := range workloads(*flagScale) {
		row := row{name: w.name, what: w.what, by: map[string]*outcome{}}
		for j := range sides {
			sd := sides[(i+j)%len(sides)]
			o, err := measure(ctx, srv, sd, func() (outcome, error) {
				if w.release {
					return sd.releaseAll(ctx, w.spec.Conc)
				}
				return sd.add(ctx, w.spec)
			})
			if err != nil {
				log.Fatalf("%s %s: %v", w.name, sd.name(), err)
			}
			row.by[sd.name()] = &o
			logProgress(w.name, sd.name(), o)
		}
		tbl.rows = append(tbl.rows, row)
	}

	tbl.raw = rawCAS(ctx, srv.cli, *flagRawDur)

	for i, d := range densities {
		row := row{name: fmt.Sprintf("%d pods", d), by: map[string]*outcome{}}
		for j := range sides {
			sd := sides[(i+j)%len(sides)]
			o, err := densityStep(ctx, srv, sd, d, *flagWindow)
			if err != nil {
				log.Fatalf("density %d %s: %v", d, sd.name(), err)
			}
			row.by[sd.name()] = &o
			logProgress(row.name, sd.name(), o)
		}
		tbl.density = append(tbl.density, row)
	}
	tbl.print(os.Stdout, sideNames(sides))
}

// measure runs one side's part of a workload between two marks of etcd,
// replays what it wrote, then compacts and defragments etcd.
func measure(ctx context.Context, srv *server, sd side, run func() (outcome, error)) (outcome, error) {
	before, err := srv.mark(ctx)
	if err != nil {
		return outcome{}, err
	}
	o, err := run()
	if err != nil {
		return outcome{}, err
	}
	after, err := srv.mark(ctx)
	if err != nil {
		return outcome{}, err
	}
	o.DBGrowth = after.dbSize - before.dbSize
	if o.Bytes, o.Puts, err = srv.written(ctx, sd.prefix(), before, after); err != nil {
		return outcome{}, err
	}
	return o, srv.compact(ctx)
}

// densityStep fills the side's density node up to pods addresses (not
// measured), then measures window ADDs in a row there.
func densityStep(ctx context.Context, srv *server, sd side, pods, window int) (outcome, error) {
	node := []string{"density-node"}
	have := 0
	for _, d := range densities {
		if d >= pods {
			break
		}
		have = d + window
	}
	if pods > have {
		if _, err := sd.add(ctx, addSpec{Nodes: node, Conc: 1, N: pods - have, NS: "fill"}); err != nil {
			return outcome{}, err
		}
	}
	return measure(ctx, srv, sd, func() (outcome, error) {
		return sd.add(ctx, addSpec{Nodes: node, Conc: 1, N: window, NS: "density"})
	})
}

// rawCAS measures single-key compare-and-swap transactions on distinct
// keys from one client: the ceiling of one write at a time.
func rawCAS(ctx context.Context, cli *clientv3.Client, d time.Duration) latency.Result {
	return latency.Measure(1, d, func(w, i int) error {
		k := fmt.Sprintf("/raw-cas/%d", i)
		r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", 0)).Then(clientv3.OpPut(k, "v")).Commit()
		if err == nil && !r.Succeeded {
			err = fmt.Errorf("raw CAS of %s lost", k)
		}
		return err
	})
}

func sideNames(sides []side) []string {
	var names []string
	for _, s := range sides {
		names = append(names, s.name())
	}
	return names
}

func logProgress(what, name string, o outcome) {
	log.Printf("%-9s %-8s %6d ops %8s %3d errors  p50 %s", what, name, o.N, fmtRate(&o), o.Errors, latency.Ms(o.Pct(50)))
	if o.FirstErr != "" {
		log.Printf("%-9s %-8s first error: %s", what, name, o.FirstErr)
	}
}
