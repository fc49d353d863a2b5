// Command kube-bench measures ADD through the Kubernetes API as real CNI
// plugin processes (one exec per call, CNI_* environment and the
// configuration on stdin, as a runtime runs them), in one run against one
// real kube-apiserver (internal/kubetest: the cached build, the CRDs and
// RBAC of deploy/ applied), and prints a table; numbers are printed,
// never asserted:
//
//   - ipkeeper kubernetes: the ipkeeper plugin on the kubernetes datastore
//     (it execs its sibling ipkeeper-kube), authenticated as the node
//     ServiceAccount kube-system/ipkeeper-node with the shipped RBAC;
//   - ipkeeper etcd: the same plugin on the etcd datastore of an embedded
//     etcd (etcdtest);
//   - whereabouts: whereabouts (-whereabouts-version, v0.9.x) built from
//     its Go module into a cache keyed by version, its CRDs applied from
//     the module's doc/crds/, with the admin kubeconfig.
//
// For each concurrency of -conc, each mode runs a cell: -n ADDs, -conc
// processes at a time, attachment i on node i mod -nodes (its nodeName,
// and a node lock directory of its own, as on separate machines), with a
// unique container ID and pod (CNI_ARGS K8S_POD_NAMESPACE/K8S_POD_NAME)
// per call; then a DEL of every attachment that was added. Each cell has
// a fresh partition (ipkeeper: prefix; whereabouts: a /16 of its own,
// whose IPPool is deleted afterwards), so cells are independent. Before
// its measured ADDs a cell runs one ADD and DEL per node, unmeasured: the
// pool exists and each node holds its block, as in a cluster that has
// run pods before (-cold skips that; without -cold, one extra cold cell of
// the agent at concurrency 8 shows what the first ADDs on fresh nodes
// cost). Each phase starts once the machine is idle (settle), so that no
// cell pays for the previous one's trailing work. A cell
// gets -cell-timeout per phase; one that crawls is cut off and prints what
// was done. Then the goal ratios, and -goal-adds ADDs over the nodes on
// the kubernetes datastore at the concurrency that had the best ADD/s (in
// a fresh partition of its own, not deleted: it is the last run). Last,
// the floor (-floor): the CPU an exec of /bin/true and of the plugin's
// VERSION cost, and one IPAMNode compare-and-swap (small, and of 50
// handles) costs the API server and its etcd — what no design with one
// exec and one write per ADD goes below on this machine.
//
//	IPKEEPER_KUBE_APISERVER=$(scripts/kube-apiserver.sh) go run ./test/bench/kube [-bin bin] [-n 100] [-conc 1,8,64]
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
	"github.com/ipkeeper/ipkeeper/internal/testenv"
	"github.com/ipkeeper/ipkeeper/test/e2e/cnirun"
)

var (
	flagBin         = flag.String("bin", "", "directory holding ipkeeper and ipkeeper-kube (default: go build both into a temporary directory)")
	flagN           = flag.Int("n", 100, "ADDs per cell")
	flagConc        = flag.String("conc", "1,8,64", "concurrencies, comma-separated")
	flagNodes       = flag.Int("nodes", 20, "nodes the ADDs are spread over")
	flagCellTimeout = flag.Duration("cell-timeout", 60*time.Second, "time limit of a cell's ADDs, and again of its DELs")
	flagGoalAdds    = flag.Int("goal-adds", 1000, "ADDs of the goal run on the kubernetes datastore (0: skip it)")
	flagGoalTimeout = flag.Duration("goal-timeout", 3*time.Minute, "time limit of the goal run")
	flagWAVersion   = flag.String("whereabouts-version", "v0.9.2", "whereabouts module version")
	flagWABin       = flag.String("whereabouts", "", "whereabouts binary (default: built from the module into the cache)")
	flagRequests    = flag.Bool("requests", false, "print each cell's API requests per ADD by verb and resource")
	flagCold        = flag.Bool("cold", false, "measure every cell on fresh nodes and a fresh pool (each node's first ADD claims its block), instead of warming each cell's nodes first; without it one extra cold cell of the agent at concurrency 8 is run")
	flagFloor       = flag.Bool("floor", true, "also measure the floor: CPU of an empty exec, of the plugin's VERSION, of one IPAMNode write")
	flagModes       = flag.String("modes", modeKube+","+modeAgent+","+modeEtcd+",whereabouts",
		"comma-separated modes to run (a name, or its first word); also: "+modeKubeDirect)
)

// Mode names; the goal ratios refer to them.
const (
	modeKube = "ipkeeper kubernetes"
	modeEtcd = "ipkeeper etcd"
	// modeKubeDirect execs ipkeeper-kube itself, without the hand-off
	// from ipkeeper: what the extra exec costs. Not run by default.
	modeKubeDirect = "ipkeeper-kube direct"
)

func main() {
	flag.Parse()
	log.SetFlags(0)
	concs, err := parseConcs(*flagConc)
	if err != nil || *flagN <= 0 || *flagNodes <= 0 || *flagNodes > 99 {
		log.Fatalf("-conc %q (%v), -n %d, -nodes %d (1..99): bad flags", *flagConc, err, *flagN, *flagNodes)
	}
	ctx := context.Background()
	tmp, err := os.MkdirTemp("", "kube-bench-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(tmp)

	binDir := *flagBin
	if binDir == "" {
		binDir = filepath.Join(tmp, "bin")
		if err := testenv.Build(ctx, binDir, "./cmd/ipkeeper", "./cmd/ipkeeper-kube", "./cmd/ipkeeper-agent"); err != nil {
			log.Fatal(err)
		}
	}
	ipk := filepath.Join(binDir, "ipkeeper")
	for _, b := range []string{ipk, filepath.Join(binDir, "ipkeeper-kube")} {
		if _, err := os.Stat(b); err != nil {
			log.Fatalf("%v (ipkeeper-kube must sit next to ipkeeper; make build)", err)
		}
	}

	t0 := time.Now()
	srv, err := kubetest.StartMain()
	if err != nil {
		log.Fatalf("start kube-apiserver (set IPKEEPER_KUBE_APISERVER or run `make kube-apiserver`): %v", err)
	}
	defer srv.Stop()
	ety, err := etcdtest.Start(filepath.Join(tmp, "etcd"), nil)
	if err != nil {
		log.Fatalf("start embedded etcd: %v", err)
	}
	defer ety.Close()
	// Each node's credentials, as the installer writes them on the node:
	// the ipkeeper-node ServiceAccount's token bound to a pod on it, which
	// deploy/'s node-writes policy requires of the node's writes.
	nodeKC := make([]string, *flagNodes)
	for n := range nodeKC {
		nodeKC[n] = filepath.Join(tmp, nodeName(n)+".kubeconfig")
		if err := srv.WriteNodeKubeconfig(ctx, nodeKC[n], nodeName(n)); err != nil {
			log.Fatal(err)
		}
	}
	if meter, err = newMeter(srv); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("kube-apiserver %s and the etcd datastore's embedded etcd %s up in %v\n", srv.URL, ety.Endpoint, time.Since(t0).Round(time.Millisecond))

	all := []*mode{
		ipkeeperMode(modeKube, "ipkeeper on the kubernetes datastore (it execs ipkeeper-kube) as ServiceAccount kube-system/ipkeeper-node with deploy/'s RBAC and node-writes policy", ipk, tmp, func(cell, node int) map[string]any {
			return map[string]any{"type": "kubernetes", "kubeconfig": nodeKC[node], "prefix": fmt.Sprintf("bk-%d", cell)}
		}),
		ipkeeperMode(modeKubeDirect, "ipkeeper-kube exec'd directly, same config and ServiceAccount", filepath.Join(binDir, "ipkeeper-kube"), tmp, func(cell, node int) map[string]any {
			return map[string]any{"type": "kubernetes", "kubeconfig": nodeKC[node], "prefix": fmt.Sprintf("bk-%d", cell)}
		}),
		ipkeeperMode(modeEtcd, "the same ipkeeper binary on the etcd datastore of an embedded etcd", ipk, tmp, func(cell, _ int) map[string]any {
			return map[string]any{"type": "etcd", "endpoints": []string{ety.Endpoint}, "prefix": fmt.Sprintf("/bench-kube-%d", cell)}
		}),
	}
	if wanted(modeAgent) {
		agentBin := filepath.Join(binDir, "ipkeeper-agent")
		if _, err := os.Stat(agentBin); err != nil {
			log.Fatalf("%v (make build)", err)
		}
		ag, err := startAgents(ctx, srv, agentBin, nodeKC, tmp, *flagNodes)
		if err != nil {
			log.Fatal(err)
		}
		defer ag.stop()
		defer func() {
			fmt.Printf("\nipkeeper-agent peak resident memory (the largest of %d): %.1f MiB\n", len(ag.procs), float64(ag.peakRSS())/1024)
		}()
		all = append(all, agentMode(ipk, tmp, nodeKC, ag))
	}
	waName := "whereabouts " + *flagWAVersion
	if wanted(waName) {
		wa, err := setupWhereabouts(ctx, srv, tmp, waName)
		if err != nil {
			log.Fatal(err)
		}
		all = append(all, wa)
	}
	var modes []*mode
	for _, m := range all {
		if wanted(m.name) {
			modes = append(modes, m)
		}
	}
	la, _ := os.ReadFile("/proc/loadavg")
	for _, m := range modes {
		fmt.Printf("%s: %s\n", m.name, m.about)
	}
	warmth := "each node warmed by one unmeasured ADD and DEL"
	if *flagCold {
		warmth = "fresh nodes and pool (-cold)"
	}
	fmt.Printf("%d ADDs per cell over %d nodes (%s), then DEL of each; cell phase limit %v; %d CPUs, load %s\n\n",
		*flagN, *flagNodes, warmth, *flagCellTimeout, runtime.NumCPU(), strings.Join(strings.Fields(string(la))[:3], " "))

	// Warm the page cache and each backend's first connection: a few
	// unmeasured calls per mode.
	cell := 0
	for _, m := range modes {
		r, err := runCell(ctx, m, cell, 1, 2, *flagNodes, *flagCellTimeout, true, false)
		if err != nil {
			log.Fatal(err)
		}
		if r.add.res.N == 0 {
			log.Fatalf("%s: warm-up ADDs failed: %s", m.name, r.add.firstErr)
		}
	}

	printHeader()
	results := map[string]map[int]cellResult{}
	for _, c := range concs {
		for _, m := range modes {
			cell++
			r, err := runCell(ctx, m, cell, c, *flagN, *flagNodes, *flagCellTimeout, true, !*flagCold)
			if err != nil {
				log.Fatal(err)
			}
			printRow(r)
			if results[m.name] == nil {
				results[m.name] = map[int]cellResult{}
			}
			results[m.name][c] = r
		}
	}
	var cold *cellResult
	if i := slices.IndexFunc(modes, func(m *mode) bool { return m.name == modeAgent }); i >= 0 && !*flagCold && slices.Contains(concs, 8) {
		cell++
		r, err := runCell(ctx, modes[i], cell, 8, *flagN, *flagNodes, *flagCellTimeout, true, false)
		if err != nil {
			log.Fatal(err)
		}
		r.mode += ", cold"
		printRow(r)
		cold = &r
	}
	printGoals(results, waName, concs, cold)

	for _, name := range []string{modeKube, modeAgent} {
		kube := results[name]
		if *flagGoalAdds <= 0 || kube == nil {
			continue
		}
		best := concs[0]
		for _, c := range concs {
			if kube[c].add.res.Rate() > kube[best].add.res.Rate() {
				best = c
			}
		}
		cell++
		var km *mode
		for _, m := range modes {
			if m.name == name {
				km = m
			}
		}
		r, err := runCell(ctx, km, cell, best, *flagGoalAdds, *flagNodes, *flagGoalTimeout, false, false)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("\n%d ADDs over %d nodes, %s, at concurrency %d (its best ADD/s above; a fresh partition, no DEL after):\n",
			*flagGoalAdds, *flagNodes, name, best)
		printHeader()
		printRow(r)
		fmt.Printf("time for %d ADDs: %.2fs, %d succeeded (goal: < 10 s)\n", *flagGoalAdds, r.add.res.Wall.Seconds(), r.add.res.N)
		printCPUBound(r)
	}
	if *flagFloor {
		var waRate float64
		if r, ok := results[waName][8]; ok {
			waRate = r.add.res.Rate()
		}
		if err := floor(ctx, srv, ipk, waRate); err != nil {
			log.Fatal(err)
		}
	}
}

// ipkeeperMode runs the ipkeeper plugin with the datastore ds(cell, node)
// gives: a /16 pool (the default block size), the call's node as nodeName,
// and a node lock directory per node.
func ipkeeperMode(name, about, bin, tmp string, ds func(cell, node int) map[string]any) *mode {
	return &mode{
		name:  name,
		about: about,
		bin:   bin,
		prepare: func(_ context.Context, cell int) (callFunc, error) {
			confs := make([][]byte, *flagNodes)
			locks := make([]string, *flagNodes)
			for n := range confs {
				locks[n] = filepath.Join(tmp, "lock", strings.ReplaceAll(name, " ", "-"), nodeName(n))
				if err := os.MkdirAll(locks[n], 0o700); err != nil {
					return nil, err
				}
				b, err := jsonConf(map[string]any{"cniVersion": "1.0.0", "name": "bench", "type": "bridge",
					"ipam": map[string]any{"type": "ipkeeper", "nodeName": nodeName(n), "datastore": ds(cell, n),
						"ranges": []any{[]any{map[string]any{"subnet": "10.64.0.0/16"}}}}})
				if err != nil {
					return nil, err
				}
				confs[n] = b
			}
			return func(node int, id string) cnirun.Call {
				return cnirun.Call{ContainerID: id, NetNS: "/var/run/netns/" + id, IfName: "eth0", Args: podArgs(id),
					Stdin: confs[node], Env: []string{"IPKEEPER_LOCK_DIR=" + locks[node]}}
			}, nil
		},
	}
}

// setupWhereabouts fetches the module, builds (or reuses) the binary and
// applies its CRDs.
func setupWhereabouts(ctx context.Context, srv *kubetest.Server, tmp, name string) (*mode, error) {
	src, err := whereaboutsSource(ctx, *flagWAVersion)
	if err != nil {
		return nil, err
	}
	bin := *flagWABin
	if bin == "" {
		if bin, err = whereaboutsBinary(ctx, src, *flagWAVersion); err != nil {
			return nil, err
		}
	}
	if err := applyWhereaboutsCRDs(ctx, srv, src); err != nil {
		return nil, err
	}
	m, err := whereaboutsMode(bin, tmp, srv)
	if err != nil {
		return nil, err
	}
	m.name = name
	fmt.Printf("whereabouts: %s (CRDs from %s)\n", bin, filepath.Join(src, "doc", "crds"))
	return m, nil
}

// wanted reports whether -modes selects the mode called name.
func wanted(name string) bool {
	for _, m := range strings.Split(*flagModes, ",") {
		if strings.TrimSpace(m) == name || strings.HasPrefix(name, strings.TrimSpace(m)+" ") {
			return true
		}
	}
	return false
}

func parseConcs(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || c <= 0 {
			return nil, fmt.Errorf("concurrency %q", f)
		}
		out = append(out, c)
	}
	return out, nil
}
