// Command scale-bench simulates a large cluster on the Kubernetes
// datastore on this machine and measures ipkeeper's processes in it
// against the goals of a 5 000-node cluster; numbers are printed with
// their goal and "met" or "missed", never asserted.
//
// A real kube-apiserver (internal/kubetest: the cached build, deploy/'s
// CRDs, RBAC and node-writes policy) with its etcd holds -nodes Node
// objects and -pods Pods bound to each (written straight into its etcd as
// the API server stores them, protobuf, then listed by it; with
// -direct=false created through the API, -conc at a time), and the pods'
// allocations — one dual-stack record per pod,
// two blocks per family per node — written by a generator through the
// store contract (datastore.Open, CreatePool, CreateClaim, CreateNode with
// node objects built as the allocator builds them), never as raw objects.
// Then the real binaries run as processes against it: ipkeeper-controller
// (as the shipped ServiceAccount kube-system/ipkeeper-controller) with the
// address map it serves, and on -add-nodes nodes an ipkeeper-agent (as
// kube-system/ipkeeper-node, bound to a pod on the node) in front of the
// ipkeeper plugin, exec'd per ADD. A churn replaces pods at -churn
// changes per second (a pod deleted and its allocation released, a pod
// created and an address of each family allocated: what DEL and ADD do),
// a few pods are deleted without release (leaks) and -delete-nodes Node
// objects are deleted, while the plugin measures ADDs.
//
// The controller's traffic is counted exactly by a reverse proxy its
// kubeconfig points to (requests by verb and resource, request and
// response bytes as on the wire); the agents of the measured nodes go
// through a proxy of their own, which counts the API requests of each
// warm ADD. CPU and memory come from /proc; the API server's etcd runs in
// this process: its write volume comes from its WAL counter, its CPU from
// a CPU profile of the window (its goroutines carry a pprof label).
//
// Before the big cluster, the same ADDs run on a -small-node cluster of
// its own (API server, controller, agents and churn alike): the ratio of
// the ADD medians is the cost of the cluster's size to an ADD.
//
//	IPKEEPER_KUBE_APISERVER=$(scripts/kube-apiserver.sh) go run ./test/bench/scale [-bin bin] [-nodes 500] [-churn 10]
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

var (
	flagBin         = flag.String("bin", "bin", "directory holding ipkeeper, ipkeeper-kube, ipkeeper-agent and ipkeeper-controller (make build)")
	flagNodes       = flag.Int("nodes", 500, "nodes of the big cluster (the issue's goal scale is 5000)")
	flagPods        = flag.Int("pods", 110, "pods (dual-stack allocations) per node")
	flagConc        = flag.Int("conc", 32, "concurrent API requests (or etcd transactions) while generating")
	flagDirect      = flag.Bool("direct", true, "write Node and Pod objects straight into the API server's etcd (false: create them through the API)")
	flagChurn       = flag.Float64("churn", 10, "pod changes per second at steady state (a deletion or a creation each)")
	flagDeleteNodes = flag.Int("delete-nodes", 2, "Node objects deleted during the steady state")
	flagLeaks       = flag.Int("leaks", 20, "pods deleted without release during the steady state")
	flagGrace       = flag.Duration("grace", 10*time.Second, "the controller's --leak-grace")
	flagResync      = flag.Duration("resync", time.Minute, "the controller's --resync")
	flagWindow      = flag.Duration("window", time.Minute, "length of the steady-state measurement")
	flagAddNodes    = flag.Int("add-nodes", 3, "nodes with an agent where the plugin measures ADD")
	flagAdds        = flag.Int("adds", 30, "ADDs measured during the churn (each then DEL'd)")
	flagMapAdds     = flag.Int("map-adds", 5, "of those, ADDs whose appearance in the map is waited for")
	flagMapWait     = flag.Duration("map-wait", 30*time.Second, "how long an ADD waits for the map to show it")
	flagQuietAdds   = flag.Int("quiet-adds", 20, "ADDs after the churn, for API requests and etcd bytes per ADD")
	flagSmall       = flag.Int("small", 20, "nodes of the comparison cluster (0: skip it)")
	flagKeep        = flag.String("logs", "", "copy the processes' logs into this directory")
	flagHeap        = flag.String("heap", "", "save the controller's heap profile at the end of the window to this path prefix (-<nodes>.pprof appended)")
)

const prefix = "scale"

func main() {
	flag.Parse()
	log.SetFlags(0)
	if *flagNodes < *flagAddNodes+*flagDeleteNodes+*flagLeaks+1 || *flagAddNodes < 1 || *flagPods < 1 || *flagChurn < 0 {
		log.Fatalf("-nodes %d must exceed -add-nodes + -delete-nodes + -leaks, -add-nodes and -pods be positive", *flagNodes)
	}
	for _, b := range []string{"ipkeeper", "ipkeeper-kube", "ipkeeper-agent", "ipkeeper-controller"} {
		if _, err := os.Stat(filepath.Join(*flagBin, b)); err != nil {
			log.Fatalf("%v (make build)", err)
		}
	}
	ctx := context.Background()
	la, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("scale-bench %s: %d nodes x %d dual-stack pods, churn %.0f pod changes/s, grace %v, resync %v, window %v; %d CPUs, load %s\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), *flagNodes, *flagPods, *flagChurn, *flagGrace, *flagResync, *flagWindow,
		runtime.NumCPU(), strings.Join(strings.Fields(string(la))[:3], " "))

	var small *result
	if *flagSmall > 0 {
		fmt.Printf("\n== comparison cluster: %d nodes\n", *flagSmall)
		r, err := run(ctx, *flagSmall, false)
		if err != nil {
			log.Fatalf("comparison cluster: %v", err)
		}
		small = r
	}
	fmt.Printf("\n== big cluster: %d nodes\n", *flagNodes)
	big, err := run(ctx, *flagNodes, true)
	if err != nil {
		log.Fatalf("big cluster: %v", err)
	}
	report(big, small)
}
