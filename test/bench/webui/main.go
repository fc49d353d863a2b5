// Command webui-bench measures the address map at scale: it fills a
// datastore with -nodes nodes of -pods pods each (by default 5 000 x 110:
// 550 000 addresses in a /12 pool of /26 blocks, the etcd scale bench's
// shape), serves the map over it and prints
//
//  1. how long the map's first full read of the datastore takes, the
//     memory it then holds (the map's and its view's, per address), and
//     how long the datastore's list alone takes (the part the map waits
//     for);
//  2. the JSON API's answer times (p50 and max of -n requests each) and
//     sizes: /api/pools, /api/nodes, /api/blocks/{cidr}, /api/search;
//  3. the page load in headless chromium: from navigation start to the
//     overview drawn (window.ipkMap.ready), with its fetch and draw
//     parts, for -loads fresh loads;
//  4. one allocation at that scale: from its commit to the page drawing it;
//  5. the first API answers after a change (the overview rendered again);
//  6. what one poll of the datastore costs: the reads a map polling it
//     would make when nothing changed and when one node object changed.
//
// Numbers are printed, never asserted.
//
//	go run ./test/bench/webui [-datastore etcd|local|kubernetes] [-nodes 5000] [-pods 110] [-loads 3]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
	"github.com/ipkeeper/ipkeeper/internal/store/kube"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
	"github.com/ipkeeper/ipkeeper/internal/storeview"
	"github.com/ipkeeper/ipkeeper/internal/webui"
	"github.com/ipkeeper/ipkeeper/test/webui/webuitest"
)

var (
	flagStore    = flag.String("datastore", "etcd", "datastore to fill: etcd (embedded unless -endpoint), local (a temporary directory) or kubernetes (a kube-apiserver of internal/kubetest)")
	flagEndpoint = flag.String("endpoint", "", "etcd client URL to use instead of an embedded etcd")
	flagNodes    = flag.Int("nodes", 5000, "nodes")
	flagPods     = flag.Int("pods", 110, "pods per node")
	flagN        = flag.Int("n", 20, "requests per API measurement")
	flagLoads    = flag.Int("loads", 3, "page loads in the browser")
	flagShot     = flag.String("screenshot", "", "write a screenshot of the loaded page to this PNG file")
	flagProfile  = flag.String("profile", "", "write a CPU profile of the map's first read (read.cpu) and a heap profile after it (read.heap) into this directory")
)

func main() {
	flag.Parse()
	log.SetFlags(0)
	ctx := context.Background()
	ds, cleanup := datastoreFor(ctx)
	defer cleanup()

	st, err := datastore.Open(ctx, ds, datastore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	t0 := time.Now()
	total := fill(ctx, st, *flagNodes, *flagPods)
	if err := st.Close(); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("datastore %s: %d nodes x %d pods = %d addresses in 10.0.0.0/12 (/26 blocks), written in %v\n",
		ds.Type, *flagNodes, *flagPods, total, time.Since(t0).Round(time.Millisecond))

	// 1. The map's first read.
	runtime.GC()
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0 := cpuTime()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	u, err := webui.New(webui.Options{Datastore: ds, Listen: l.Addr().String(),
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		log.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = u.Serve(sctx, l) })
	defer func() { stop(); wg.Wait() }()
	base := "http://" + l.Addr().String() + "/"
	if *flagProfile != "" {
		f, err := os.Create(filepath.Join(*flagProfile, "read.cpu"))
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
	}
	t0 = time.Now()
	for {
		var ov struct {
			Loaded bool   `json:"loaded"`
			Error  string `json:"error"`
		}
		if err := getJSON(base+"api/pools", &ov); err == nil && ov.Loaded {
			break
		}
		if time.Since(t0) > 10*time.Minute {
			log.Fatalf("the map did not read the datastore within 10 minutes (%s)", ov.Error)
		}
		time.Sleep(100 * time.Millisecond)
	}
	runtime.GC()
	if *flagProfile != "" {
		pprof.StopCPUProfile()
		f, err := os.Create(filepath.Join(*flagProfile, "read.heap"))
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.WriteHeapProfile(f); err != nil {
			log.Fatal(err)
		}
		_ = f.Close()
	}
	took, cpu := time.Since(t0), cpuTime()-cpu0
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	held := int64(ms.HeapAlloc) - int64(ms0.HeapAlloc)
	fmt.Printf("\n1. first full read by the map: %v (this process's CPU meanwhile: %v; the machine's load average: %s); heap after it: %d MiB, of which the map and its view of the datastore: %d MiB (%d B per address)\n",
		took.Round(time.Millisecond), cpu.Round(time.Millisecond), loadAvg(), ms.HeapAlloc>>20, held>>20, held/int64(total))
	if d, err := listAlone(ctx, ds); err != nil {
		log.Fatal(err)
	} else if d > 0 {
		fmt.Printf("   of it, the datastore's list alone (the view's source, listed once more now): %v; the map's own part: %v\n",
			d.Round(time.Millisecond), (took - d).Round(time.Millisecond))
	}

	// 2. The API.
	fmt.Printf("\n2. API answers, %d requests each (%s)\n", *flagN, "p50 / max; the first /api/pools of a generation renders and caches it")
	fmt.Printf("%-42s %9s %9s %10s %10s\n", "request", "p50", "max", "bytes", "gzip")
	mid := fmt.Sprintf("node-%05d", *flagNodes/2)
	for _, path := range []string{"api/pools", "api/nodes", "api/blocks/10.0.0.0/26", "api/search?q=10.0.1.7",
		"api/search?q=" + mid, "api/search?q=pod-17"} {
		measureAPI(base, path, *flagN)
	}

	// 3. The page in the browser.
	chromium, err := webuitest.Chromium()
	if err != nil {
		log.Fatalf("chromium: %v (apt-get install chromium)", err)
	}
	prof, err := os.MkdirTemp("", "webui-bench-profile-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(prof)
	bctx, bcancel := webuitest.Browser(ctx, chromium, prof)
	defer bcancel()
	fmt.Printf("\n3. page load in headless chromium (navigation start to the overview drawn)\n")
	fmt.Printf("%-6s %10s %10s %10s %8s %8s\n", "load", "ready", "fetch", "draw", "blocks", "nodes")
	var readies []float64
	for i := range *flagLoads {
		if err := chromedp.Do(bctx, chromedp.Navigate(base)); err != nil {
			log.Fatal(err)
		}
		if _, err := chromedp.Run(bctx, chromedp.Poll[bool]("window.ipkMap && window.ipkMap.ready === true",
			chromedp.WithPollingTimeout(2*time.Minute))); err != nil {
			log.Fatal(err)
		}
		var r struct {
			Ready, Fetch, Draw float64
			Blocks, Nodes      int
			Steps              map[string]float64
		}
		js, err := chromedp.Run(bctx, chromedp.Evaluate[string](`JSON.stringify({Ready: ipkMap.timing.readyAt, Fetch: ipkMap.timing.fetchMs,
			Draw: ipkMap.timing.renderMs, Steps: ipkMap.timing.steps, Blocks: Object.values(ipkMap.pools).reduce((n, p) => n + p.blocks.length, 0),
			Nodes: document.querySelectorAll('#nodetable tbody tr').length})`))
		if err != nil {
			log.Fatal(err)
		}
		if err := json.Unmarshal([]byte(js), &r); err != nil {
			log.Fatal(err)
		}
		readies = append(readies, r.Ready)
		fmt.Printf("%-6d %8.0fms %8.0fms %8.0fms %8d %8d   (draw: pools %.0fms, node table %.0fms)\n", i+1, r.Ready, r.Fetch, r.Draw,
			r.Blocks, r.Nodes, r.Steps["pools"], r.Steps["nodes"])
	}
	slices.Sort(readies)
	fmt.Printf("median page load: %.0f ms\n", readies[len(readies)/2])
	if *flagShot != "" {
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err == nil {
			err = os.WriteFile(*flagShot, png, 0o644)
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("screenshot: %s\n", *flagShot)
	}

	// 4. One allocation at scale, seen by the page.
	var gen int
	gjs, err := chromedp.Run(bctx, chromedp.Evaluate[int]("window.ipkMap.generation"))
	if err != nil {
		log.Fatal(err)
	}
	gen = gjs
	st, err = datastore.Open(ctx, ds, datastore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	a := allocator.New(st, nil)
	h, err := a.Allocate(ctx, allocator.Request{Handle: ipam.Handle{ID: "bench.live.eth0", Node: "node-live", Network: "bench",
		ContainerID: "live", IfName: "eth0", Namespace: "default", Pod: "live"}, Sets: [][]string{{"scale"}}})
	committed := time.Now()
	if err != nil {
		log.Fatal(err)
	}
	if err := st.Close(); err != nil {
		log.Fatal(err)
	}
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](fmt.Sprintf("window.ipkMap.generation > %d && !!window.ipkMap.pools.scale.blocks.find((b) => b.node === 'node-live')", gen),
		chromedp.WithPollingTimeout(time.Minute), chromedp.WithPollingInterval(10*time.Millisecond))); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("\n4. an ADD (%s on node-live) drawn %v after its commit\n", h.IPs[0].Addr, time.Since(committed).Round(time.Millisecond))

	// 5. The first answers after a change: the overview and node table are
	// rendered again, the search looks at the changed handle aside. The
	// page is closed first, so that it does not ask before the measurement.
	bcancel()
	st, err = datastore.Open(ctx, ds, datastore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := allocator.New(st, nil).Release(ctx, "node-live", "bench.live.eth0"); err != nil {
		log.Fatal(err)
	}
	if err := st.Close(); err != nil {
		log.Fatal(err)
	}
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		var d struct {
			InUse int `json:"inUse"`
		}
		if err := getJSON(base+"api/blocks/"+h.IPs[0].Block.String(), &d); err != nil {
			log.Fatal(err)
		}
		if d.InUse == 0 {
			break
		}
		if time.Since(start) > time.Minute {
			log.Fatal("the map did not see the DEL within a minute")
		}
	}
	fmt.Printf("\n5. first answers after a DEL (the page closed before it)\n")
	for _, path := range []string{"api/pools", "api/nodes", "api/search?q=pod-17", "api/search?q=live"} {
		measureAPI(base, path, 1)
	}

	// 6. What one poll of the datastore costs (the map polls the local
	// file when it changed; etcd and the kubernetes datastore are
	// watched).
	st, err = datastore.Open(ctx, ds, datastore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	fmt.Printf("\n6. one poll's reads, %d each (p50 / max)\n", *flagN)
	measurePoll(ctx, st, *flagN)
}

// cpuTime is the CPU time this process used so far (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadAvg is the first three fields of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// listAlone times one list of ds by the source the map's view follows
// (etcd's follower, the Kubernetes API's watcher); 0 for a store without
// one.
func listAlone(ctx context.Context, ds config.Datastore) (time.Duration, error) {
	st, err := datastore.Open(ctx, ds, datastore.Options{})
	if err != nil {
		return 0, err
	}
	defer st.Close()
	var src storeview.Source
	switch s := st.(type) {
	case *kube.Store:
		src = s.Watcher()
	case *kvbacked.Store:
		f, ok := s.Follower()
		if !ok {
			return 0, nil
		}
		src = f
	default:
		return 0, nil
	}
	t0 := time.Now()
	if _, err := src.List(ctx); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// datastoreFor returns the datastore to fill and a cleanup.
func datastoreFor(_ context.Context) (config.Datastore, func()) {
	switch *flagStore {
	case "local":
		dir, err := os.MkdirTemp("", "webui-bench-local-")
		if err != nil {
			log.Fatal(err)
		}
		return config.Datastore{Type: config.DatastoreLocal, Path: dir}, func() { _ = os.RemoveAll(dir) }
	case "kubernetes":
		s, err := kubetest.StartMain()
		if err != nil {
			log.Fatalf("start kube-apiserver (IPKEEPER_KUBE_APISERVER=$(scripts/kube-apiserver.sh)): %v", err)
		}
		fmt.Printf("kube-apiserver at %s\n", s.URL)
		return config.Datastore{Type: config.DatastoreKubernetes, Kubeconfig: s.AdminKubeconfig, Prefix: "webui-bench",
			RequestTimeout: time.Minute}, s.Stop
	case "etcd":
		ep, done := *flagEndpoint, func() {}
		if ep == "" {
			s, err := etcdtest.Start("", nil)
			if err != nil {
				log.Fatalf("start embedded etcd: %v", err)
			}
			ep, done = s.Endpoint, s.Close
			fmt.Printf("embedded etcd at %s\n", ep)
		}
		return config.Datastore{Type: config.DatastoreEtcd, Endpoints: []string{ep}, Prefix: "/webui-bench",
			RequestTimeout: time.Minute}, done
	}
	log.Fatalf("-datastore %q: want etcd, local or kubernetes", *flagStore)
	return config.Datastore{}, nil
}

// fill writes the pool, and per node its ceil(pods/64) claims and its node
// object holding those blocks and one handle record per pod, from 8
// writers. It returns the number of addresses.
func fill(ctx context.Context, st store.Store, nodes, pods int) int {
	pool := ipam.Pool{Name: "scale", CIDR: netip.MustParsePrefix("10.0.0.0/12"), BlockSize: 26, Origin: "cli"}
	if _, err := st.CreatePool(ctx, store.Pool{Spec: pool}); err != nil {
		log.Fatal(err)
	}
	first, last := pool.BlockSpan()
	perNode := (pods + 63) / 64
	if uint64(nodes*perNode) > last-first+1 {
		log.Fatalf("%d nodes need %d blocks, the pool has %d", nodes, nodes*perNode, last-first+1)
	}
	created := time.Now().UTC().Add(-time.Hour)
	work := make(chan int)
	var mu sync.Mutex
	total := 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for nd := range work {
				node := fmt.Sprintf("node-%05d", nd)
				obj := store.Node{Name: node}
				n := 0
				for b := range perNode {
					cidr := pool.BlockAt(first + uint64(nd*perNode+b))
					blk := ipam.NewBlock(pool, cidr, node)
					for n < pods {
						id := fmt.Sprintf("bench.%s-%d.eth0", node, n)
						next, addr, err := blk.Assign(pool, id)
						if err != nil {
							break // the block is full
						}
						blk = next
						obj.Handles = append(obj.Handles, ipam.Handle{ID: id, Network: "bench", ContainerID: fmt.Sprintf("%s-%d", node, n),
							IfName: "eth0", Node: node, Namespace: "default", Pod: fmt.Sprintf("pod-%d", n), Created: created,
							IPs: []ipam.HandleIP{{Addr: addr, Pool: pool.Name, Block: cidr}}})
						n++
					}
					obj.Blocks = append(obj.Blocks, blk)
					if _, err := st.CreateClaim(ctx, store.Claim{BlockRef: store.BlockRef{Pool: pool.Name, CIDR: cidr}, Node: node}); err != nil {
						log.Fatalf("fill: %v", err)
					}
				}
				if _, err := st.CreateNode(ctx, obj); err != nil {
					log.Fatalf("fill: %v", err)
				}
				mu.Lock()
				total += n
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

// measurePoll prints what one poll of the map costs on st: the reads it
// makes when nothing changed and when one node object changed (local and
// etcd: the revision, then pools, claims and the node objects listed with
// only the changed one decoded; kubernetes: pools, claims and every node
// object, each time), n times each.
func measurePoll(ctx context.Context, st store.Store, n int) {
	time1 := func(f func() error) time.Duration {
		start := time.Now()
		if err := f(); err != nil {
			log.Fatal(err)
		}
		return time.Since(start)
	}
	lists := func() error {
		if _, err := st.ListPools(ctx); err != nil {
			return err
		}
		_, err := st.ListClaims(ctx, store.ClaimSelector{})
		return err
	}
	type scanner interface {
		Revision(ctx context.Context) (int64, error)
		ScanNodes(ctx context.Context, decode func(string, store.Version) bool) ([]kvbacked.ScannedNode, error)
	}
	var idle, changed []time.Duration
	for range n {
		if sc, ok := st.(scanner); ok {
			idle = append(idle, time1(func() error { _, err := sc.Revision(ctx); return err }))
			changed = append(changed, time1(func() error {
				if _, err := sc.Revision(ctx); err != nil {
					return err
				}
				if err := lists(); err != nil {
					return err
				}
				_, err := sc.ScanNodes(ctx, func(name string, _ store.Version) bool { return name == "node-00000" })
				return err
			}))
			continue
		}
		full := time1(func() error {
			if err := lists(); err != nil {
				return err
			}
			_, err := st.ListNodes(ctx, store.NodeSelector{})
			return err
		})
		idle, changed = append(idle, full), append(changed, full)
	}
	slices.Sort(idle)
	slices.Sort(changed)
	fmt.Printf("%-42s %7.1fms %7.1fms\n", "poll, nothing changed", ms(idle[len(idle)/2]), ms(idle[len(idle)-1]))
	fmt.Printf("%-42s %7.1fms %7.1fms\n", "poll, one node object changed", ms(changed[len(changed)/2]), ms(changed[len(changed)-1]))
}

func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// measureAPI prints the p50 and max answer time of n GETs of path, and the
// answer's size plain and gzipped.
func measureAPI(base, path string, n int) {
	url := base + path
	var lats []time.Duration
	var plain, gz int
	for i := range n {
		for _, enc := range []string{"identity", "gzip"} {
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			req.Header.Set("Accept-Encoding", enc)
			start := time.Now()
			resp, err := http.DefaultTransport.RoundTrip(req)
			if err != nil {
				log.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				log.Fatalf("GET %s: %v %s", url, err, resp.Status)
			}
			if enc == "identity" {
				lats = append(lats, time.Since(start))
				plain = len(b)
			} else if i == 0 {
				gz = len(b)
			}
		}
	}
	slices.Sort(lats)
	gzs := "-"
	if gz != plain {
		gzs = fmt.Sprint(gz)
	}
	fmt.Printf("%-42s %7.1fms %7.1fms %10d %10s\n", "/"+path, ms(lats[len(lats)/2]), ms(lats[len(lats)-1]), plain, gzs)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
