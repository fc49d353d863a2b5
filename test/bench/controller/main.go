// Command controller-bench measures how fast ipkeeper-controller reclaims
// leaked addresses at scale, against a real kube-apiserver:
//
//  1. -nodes Nodes and -nodes x -pods Pods (bound to their nodes) are
//     created through client-go, -conc at a time, and every pod gets an
//     IPv4 address allocated through the typed store's allocator
//     (allocator.Allocator) in the -datastore: an embedded etcd, or
//     the kube-apiserver's CRDs (a partition of its own), with the pod's
//     namespace, name and UID recorded as the plugin's ADD records them;
//  2. the real ipkeeper-controller binary runs as a process on that
//     datastore (no leader election, -grace, -resync) until its informers
//     have listed and its first pass has ended;
//  3. -leak of the pods (5% by default, spread over the nodes) are deleted
//     with grace period 0 and no CNI DEL, and the controller's
//     ipkeeper_releases_total is followed until every leaked allocation is
//     released.
//
// It prints the scale, the time from the last delete to the last release
// (and how much of it lies beyond the grace period: the goal is at most
// 10s), the Kubernetes API requests the controller made by verb and
// resource (the goal: no GET of single pods, the informers' cache only),
// the controller's CPU time (utime+stime from /proc/PID/stat) for startup
// and for the reclaim, its peak resident memory (VmHWM from
// /proc/PID/status) and its reconcile pass durations. Numbers are printed,
// never asserted.
//
// The kube-apiserver comes from $IPKEEPER_KUBE_APISERVER or the cache of
// scripts/kube-apiserver.sh (`make kube-apiserver`).
//
// A pass reads the whole store (every claim, every node object, every
// pool: the typed store has no watch), so the pass durations printed are
// what polling costs at that scale.
//
//	go run ./test/bench/controller [-datastore etcd|kubernetes] [-nodes 100] [-pods 50] [-leak 0.05] [-grace 10s]
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	_ "github.com/ipkeeper/ipkeeper/internal/datastore/kubeopen" // the kubernetes datastore
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
)

var (
	flagDatastore  = flag.String("datastore", "etcd", "the datastore: etcd (embedded) or kubernetes (the kube-apiserver's CRDs)")
	flagNodes      = flag.Int("nodes", 100, "nodes (the issue's goal scale is 1000)")
	flagPods       = flag.Int("pods", 50, "pods per node")
	flagLeak       = flag.Float64("leak", 0.05, "fraction of the pods deleted without DEL")
	flagGrace      = flag.Duration("grace", 10*time.Second, "the controller's --leak-grace")
	flagResync     = flag.Duration("resync", time.Minute, "the controller's --resync")
	flagConc       = flag.Int("conc", 16, "concurrent API requests and allocations while filling")
	flagController = flag.String("controller", "", "ipkeeper-controller binary (default: go build ./cmd/ipkeeper-controller)")
	flagTimeout    = flag.Duration("timeout", 10*time.Minute, "give up waiting for the reclaim after this long")
	flagKeepLog    = flag.String("log", "", "copy the controller's log to this file")
)

// ns is the namespace of the pods.
const ns = "bench"

func main() {
	flag.Parse()
	log.SetFlags(0)
	if *flagNodes <= 0 || *flagPods <= 0 || *flagLeak <= 0 || *flagLeak > 1 || *flagConc <= 0 {
		log.Fatalf("-nodes %d, -pods %d and -conc %d must be positive and -leak %v in (0, 1]", *flagNodes, *flagPods, *flagConc, *flagLeak)
	}
	if *flagDatastore != config.DatastoreEtcd && *flagDatastore != config.DatastoreKubernetes {
		log.Fatalf("-datastore %q: want etcd or kubernetes", *flagDatastore)
	}
	if *flagPods > 62 {
		log.Fatalf("-pods %d: at most 62 pods per node (one /26 block each)", *flagPods)
	}
	ctx := context.Background()
	tmp, err := os.MkdirTemp("", "controller-bench-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	bin := *flagController
	if bin == "" {
		bin = filepath.Join(tmp, "ipkeeper-controller")
		if out, err := exec.Command("go", "build", "-o", bin, "./cmd/ipkeeper-controller").CombinedOutput(); err != nil {
			log.Fatalf("go build ./cmd/ipkeeper-controller: %v\n%s", err, out)
		}
	}

	t0 := time.Now()
	srv, err := kubetest.StartMain()
	if err != nil {
		log.Fatalf("start kube-apiserver (set IPKEEPER_KUBE_APISERVER or run `make kube-apiserver`): %v", err)
	}
	defer srv.Stop()
	var ds config.Datastore
	var env []string
	if *flagDatastore == config.DatastoreEtcd {
		e, err := etcdtest.Start(filepath.Join(tmp, "etcd"), nil)
		if err != nil {
			log.Fatalf("start embedded etcd: %v", err)
		}
		defer e.Close()
		ds = config.Datastore{Type: config.DatastoreEtcd, Endpoints: []string{e.Endpoint}, Prefix: "/ipkeeper"}
		env = []string{"IPKEEPER_DATASTORE=etcd", "IPKEEPER_ETCD_ENDPOINTS=" + e.Endpoint, "IPKEEPER_ETCD_PREFIX=/ipkeeper"}
		fmt.Printf("kube-apiserver at %s and the datastore's embedded etcd at %s up in %v\n", srv.URL, e.Endpoint, time.Since(t0).Round(time.Millisecond))
	} else {
		ds = config.Datastore{Type: config.DatastoreKubernetes, Kubeconfig: srv.AdminKubeconfig, Prefix: "bench"}
		env = []string{"IPKEEPER_DATASTORE=kubernetes", "IPKEEPER_DATASTORE_PREFIX=bench"} // the controller's --kubeconfig
		fmt.Printf("kube-apiserver at %s, also the datastore (partition bench), up in %v\n", srv.URL, time.Since(t0).Round(time.Millisecond))
	}

	total := *flagNodes * *flagPods
	fmt.Printf("scale: %d nodes x %d pods = %d pods and allocations; %.1f%% deleted without DEL; leak grace %v, resync %v\n",
		*flagNodes, *flagPods, total, 100**flagLeak, *flagGrace, *flagResync)

	st, err := datastore.Open(ctx, ds, datastore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	pods := fill(ctx, srv.Client, allocator.New(st, nil))

	c := startController(ctx, bin, tmp, srv.AdminKubeconfig, env)
	defer c.stop()
	t1 := time.Now()
	c.waitReady(ctx, 5*time.Minute)
	c.waitValue(ctx, 5*time.Minute, "ipkeeper_reconcile_duration_seconds_count", func(v float64) bool { return v >= 1 })
	startCPU := c.cpu()
	startReq := c.requests()
	firstPass := time.Duration(c.value("ipkeeper_reconcile_duration_seconds_sum") * float64(time.Second))
	fmt.Printf("\ncontroller (pid %d) ready and first pass over %d handles done %v after its start; CPU %v\n",
		c.cmd.Process.Pid, total, time.Since(t1).Round(time.Millisecond), startCPU.Round(time.Millisecond))
	fmt.Printf("first pass (one read of every claim, node object and pool; nothing to release): %v\n", firstPass.Round(time.Millisecond))

	// The leaked pods: every 1/leak-th pod, spread over every node.
	rng := rand.New(rand.NewPCG(1, 2))
	nLeak := max(1, int(float64(total)**flagLeak+0.5))
	leaked := rng.Perm(total)[:nLeak]
	fmt.Printf("\ndeleting %d pods (grace period 0, no DEL), %d at a time\n", nLeak, *flagConc)
	cpu0, req0 := c.cpu(), c.requests()
	d0 := time.Now()
	parallel(len(leaked), *flagConc, func(i int) error {
		zero := int64(0)
		return srv.Client.CoreV1().Pods(ns).Delete(ctx, pods[leaked[i]], metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	d1 := time.Now()
	fmt.Printf("deletes took %v\n", d1.Sub(d0).Round(time.Millisecond))
	first, last := c.waitReleases(ctx, nLeak, d1)
	cpu1, req1 := c.cpu(), c.requests()
	hwm, rss := c.memory()

	left, err := allocator.New(st, nil).Handles(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("\nreclaim of %d leaked addresses (%d pods remain, %d handles remain in the datastore)\n", nLeak, total-nLeak, len(left))
	fmt.Printf("  first release   %8v after the last delete\n", first.Sub(d1).Round(time.Millisecond))
	fmt.Printf("  last release    %8v after the last delete (%v after the first delete)\n", last.Sub(d1).Round(time.Millisecond), last.Sub(d0).Round(time.Millisecond))
	fmt.Printf("  beyond grace    %8v (goal: <= 10s)\n", (last.Sub(d1) - *flagGrace).Round(time.Millisecond))
	fmt.Printf("  controller CPU  %8v during the reclaim, %v in all\n", (cpu1 - cpu0).Round(time.Millisecond), cpu1.Round(time.Millisecond))
	fmt.Printf("  peak RSS        %8.1f MiB (VmHWM; now %.1f MiB)\n", float64(hwm)/1024, float64(rss)/1024)
	fmt.Printf("  passes          %8.0f, %.3fs in all (histogram sum); last pass ~%s\n",
		c.value("ipkeeper_reconcile_duration_seconds_count"), c.value("ipkeeper_reconcile_duration_seconds_sum"), c.lastPass())
	fmt.Printf("  release skips   changed %.0f, error %.0f\n",
		c.value(`ipkeeper_release_skips_total{why="changed"}`), c.value(`ipkeeper_release_skips_total{why="error"}`))

	// Passes with nothing to release: what polling the whole store costs
	// per resync period at this scale.
	n0, s0 := c.value("ipkeeper_reconcile_duration_seconds_count"), c.value("ipkeeper_reconcile_duration_seconds_sum")
	const idle = 3
	c.waitValue(ctx, idle*(*flagResync)+time.Minute, "ipkeeper_reconcile_duration_seconds_count", func(v float64) bool { return v >= n0+idle })
	n1, s1 := c.value("ipkeeper_reconcile_duration_seconds_count"), c.value("ipkeeper_reconcile_duration_seconds_sum")
	fmt.Printf("  idle passes     %8.0f after the reclaim, %v each on average (a read of the whole store every -resync %v)\n",
		n1-n0, time.Duration((s1-s0)/(n1-n0)*float64(time.Second)).Round(time.Millisecond), *flagResync)

	fmt.Printf("\nKubernetes API requests of the controller (verb resource: until ready+first pass / during the reclaim / all)\n")
	keys := map[string]bool{}
	for k := range req1 {
		keys[k] = true
	}
	var names []string
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Printf("  %-28s %6.0f %6.0f %6.0f\n", k, startReq[k], req1[k]-req0[k], req1[k])
	}
	fmt.Printf("  per-pod GETs (get pods): %.0f (goal: 0)\n", req1["get pods"])
	if *flagKeepLog != "" {
		if b, err := os.ReadFile(c.logPath); err == nil {
			_ = os.WriteFile(*flagKeepLog, b, 0o644)
		}
	}
}

// fill creates the nodes and pods and allocates one address per pod; it
// returns the pods' names, node by node.
func fill(ctx context.Context, client kubernetes.Interface, a *allocator.Allocator) []string {
	t0 := time.Now()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		log.Fatal(err)
	}
	nodes := make([]string, *flagNodes)
	parallel(len(nodes), *flagConc, func(i int) error {
		nodes[i] = fmt.Sprintf("node-%05d", i)
		_, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodes[i]}}, metav1.CreateOptions{})
		return err
	})
	total := *flagNodes * *flagPods
	names := make([]string, total)
	uids := make([]string, total)
	var done atomic.Int64
	parallel(total, *flagConc, func(i int) error {
		names[i] = fmt.Sprintf("pod-%05d-%02d", i / *flagPods, i%*flagPods)
		p, err := client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: names[i], Namespace: ns},
			Spec:       corev1.PodSpec{NodeName: nodes[i / *flagPods], Containers: []corev1.Container{{Name: "c", Image: "pause"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		uids[i] = string(p.UID)
		if n := done.Add(1); n%5000 == 0 {
			fmt.Printf("  %d pods created\n", n)
		}
		return nil
	})
	t1 := time.Now()
	fmt.Printf("created %d nodes and %d pods through the API in %v (%.0f pods/s)\n", len(nodes), total, t1.Sub(t0).Round(time.Millisecond),
		float64(total)/t1.Sub(t0).Seconds())

	pool := ipam.Pool{Name: "bench", CIDR: netip.MustParsePrefix("10.0.0.0/12"), BlockSize: 26, Origin: "config"}
	if _, err := a.EnsurePool(ctx, pool); err != nil {
		log.Fatal(err)
	}
	// One node's pods one after another (as its plugin's node lock makes
	// them); -conc nodes at a time.
	parallel(*flagNodes, *flagConc, func(n int) error {
		for j := range *flagPods {
			i := n**flagPods + j
			cid := "sandbox-" + names[i]
			_, err := a.Allocate(ctx, allocator.Request{
				Handle: ipam.Handle{ID: ipam.HandleID("bench", cid, "eth0"), Network: "bench", ContainerID: cid, IfName: "eth0",
					Node: nodes[n], Namespace: ns, Pod: names[i], PodUID: uids[i]},
				Sets: [][]string{{pool.Name}},
			})
			if err != nil {
				return fmt.Errorf("allocate for %s: %w", names[i], err)
			}
		}
		return nil
	})
	fmt.Printf("allocated %d addresses through the allocator into %s in %v (%.0f/s)\n", total, *flagDatastore, time.Since(t1).Round(time.Millisecond),
		float64(total)/time.Since(t1).Seconds())
	return names
}

// parallel runs f(0..n-1), conc at a time, and exits on the first error.
func parallel(n, conc int, f func(i int) error) {
	work := make(chan int)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range min(conc, n) {
		wg.Go(func() {
			for i := range work {
				if err := f(i); err != nil {
					once.Do(func() { first = err })
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	if first != nil {
		log.Fatal(first)
	}
}

// requestKey names a series of ipkeeper_kube_requests_total: "verb resource".
func requestKey(labels string) string {
	var verb, res string
	for _, kv := range strings.Split(labels, ",") {
		k, v, _ := strings.Cut(kv, "=")
		v = strings.Trim(v, `"`)
		switch k {
		case "verb":
			verb = v
		case "resource":
			res = v
		}
	}
	return verb + " " + res
}
