package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"

	"github.com/ipkeeper/ipkeeper/internal/kubetest"
)

// result is what one cluster's run measured.
type result struct {
	nodes, pods     int
	gen             time.Duration
	mapLoad         time.Duration // controller start to the map's overview loaded
	ready           time.Duration // controller start to /readyz and its first pass
	window          time.Duration
	ctrl            traffic // the controller's API traffic in the window
	ctrlCPU         time.Duration
	ctrlRSS, ctrlHW int64
	apiCPU, selfCPU time.Duration
	etcdCPU         time.Duration // of selfCPU, the etcd's goroutines (CPU profile)
	profCPU         time.Duration // all of the CPU profile's samples
	changes         int64         // churn changes in the window
	churnFailed     int64
	churnBehind     int64
	churnErr        string
	leakRelease     time.Duration // last leaked pod's delete to its release
	leaksReleased   int
	nodeRelease     time.Duration // node deletions to their last release
	nodesReleased   int
	adds            addResult
	quietAdds       int
	quietReqs       traffic // the measured nodes' API traffic over the quiet ADDs
	idleReqs        traffic // the same over an equal time without ADDs
	walPerAdd       float64
	agentHW         int64
}

// snap is the counters a window starts and ends with.
type snap struct {
	at                 time.Time
	ctrl               traffic
	ctrlCPU, api, self time.Duration
	changes            int64
}

// run builds a cluster of nodes nodes and measures it; full adds the
// steady-state figures, leaks and node deletions (the comparison cluster
// only measures ADD under the same churn).
func run(ctx context.Context, nodes int, full bool) (*result, error) {
	r := &result{nodes: nodes, pods: *flagPods}
	dir, err := os.MkdirTemp("", "scale-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	t0 := time.Now()
	var srv *kubetest.Server
	withEtcdLabel(ctx, func() { srv, err = kubetest.StartMain() })
	if err != nil {
		return nil, fmt.Errorf("start kube-apiserver (set IPKEEPER_KUBE_APISERVER or run `make kube-apiserver`): %w", err)
	}
	defer srv.Stop()
	// The admin client's connection was dialed under the etcd label: let
	// the next request dial one of its own.
	if hc, err := rest.HTTPClientFor(srv.Config); err == nil {
		hc.CloseIdleConnections()
	}
	fmt.Printf("  kube-apiserver %s with its etcd up in %v\n", srv.URL, time.Since(t0).Round(time.Millisecond))

	c, err := openCluster(ctx, srv, prefix)
	if err != nil {
		return nil, err
	}
	defer c.st.Close()
	t0 = time.Now()
	if err := c.generate(ctx, nodes, *flagPods, *flagConc); err != nil {
		return nil, err
	}
	r.gen = time.Since(t0)
	fmt.Printf("  generated in %v\n", r.gen.Round(time.Millisecond))

	// The controller and its map, through the counting proxy.
	cp, err := startProxy(srv.URL, srv.CAFile)
	if err != nil {
		return nil, err
	}
	defer cp.close()
	ckc := filepath.Join(dir, "controller.kubeconfig")
	if err := serviceAccountKubeconfig(ctx, srv, "kube-system", "ipkeeper-controller", ckc, cp); err != nil {
		return nil, err
	}
	ctrl, err := startController(filepath.Join(*flagBin, "ipkeeper-controller"), dir, ckc, prefix, *flagGrace, *flagResync)
	if err != nil {
		return nil, err
	}
	defer keepLog(ctrl.proc, fmt.Sprintf("controller-%d.log", nodes))
	defer ctrl.stop()
	t0 = time.Now()
	var wg sync.WaitGroup
	var mapErr error
	wg.Go(func() {
		mapErr = ctrl.mapLoaded(ctx, 10*time.Minute)
		r.mapLoad = time.Since(t0)
	})
	if err := ctrl.waitReady(ctx, 10*time.Minute); err != nil {
		return nil, fmt.Errorf("controller not ready: %w\n%s", err, ctrl.logTail())
	}
	if err := poll(ctx, 10*time.Minute, ctrl.exited, func() bool {
		return ctrl.scrape()["ipkeeper_reconcile_duration_seconds_count"] >= 1
	}); err != nil {
		return nil, fmt.Errorf("controller's first pass: %w\n%s", err, ctrl.logTail())
	}
	r.ready = time.Since(t0)
	wg.Wait()
	if mapErr != nil {
		return nil, fmt.Errorf("address map not loaded: %w\n%s", mapErr, ctrl.logTail())
	}
	fmt.Printf("  controller ready and first pass done %v after its start; map loaded after %v\n",
		r.ready.Round(time.Millisecond), r.mapLoad.Round(time.Millisecond))

	// The measured nodes: an agent each, through a proxy of their own.
	ap, err := startProxy(srv.URL, srv.CAFile)
	if err != nil {
		return nil, err
	}
	defer ap.close()
	measured := c.nodes[:*flagAddNodes]
	kcs := make([]string, len(measured))
	for i, n := range measured {
		c.freeze(n)
		direct := filepath.Join(dir, n+".direct.kubeconfig")
		kcs[i] = filepath.Join(dir, n+".kubeconfig")
		if err := srv.WriteNodeKubeconfig(ctx, direct, n); err != nil {
			return nil, err
		}
		if err := ap.proxiedKubeconfig(direct, kcs[i]); err != nil {
			return nil, err
		}
	}
	ag, err := startAgents(ctx, filepath.Join(*flagBin, "ipkeeper-agent"), dir, measured, kcs)
	if err != nil {
		return nil, err
	}
	defer ag.stop()
	pl, err := newPlugins(filepath.Join(*flagBin, "ipkeeper"), dir, prefix, measured, kcs, ag.sockets)
	if err != nil {
		return nil, err
	}
	if w := pl.runAdds(ctx, len(measured), 0, nil, 0); w.failed > 0 {
		return nil, fmt.Errorf("warm-up ADDs: %s", w.firstErr)
	}
	mctx, stopMap := context.WithCancel(ctx)
	defer stopMap()
	events, err := followMap(mctx, ctrl.mapURL)
	if err != nil {
		return nil, err
	}

	// Steady state: the churn, a window, leaks and node deletions in it,
	// and the ADDs.
	ch := &churn{c: c, rate: *flagChurn}
	cctx, stopChurn := context.WithCancel(ctx)
	var cwg sync.WaitGroup
	cwg.Go(func() { ch.run(cctx) })
	defer func() { stopChurn(); cwg.Wait() }()
	time.Sleep(5 * time.Second) // the churn under way
	take := func() snap {
		api, _ := srv.CPU()
		return snap{at: time.Now(), ctrl: cp.snapshot(), ctrlCPU: ctrl.cpu(), api: api, self: selfCPU(), changes: ch.done.Load()}
	}
	s0 := take()
	prof := startCPUProfile()
	rng := rand.New(rand.NewPCG(3, 5))
	var leaked, gone []string
	var leakAt, goneAt time.Time
	if full {
		if leaked, leakAt, err = c.leak(ctx, *flagLeaks, rng); err != nil {
			return nil, err
		}
		if gone, goneAt, err = c.deleteNodes(ctx, *flagDeleteNodes); err != nil {
			return nil, err
		}
		fmt.Printf("  steady state: %d pods deleted without release, %d Node objects deleted\n", len(leaked), len(gone))
	}
	r.adds = pl.runAdds(ctx, *flagAdds, *flagMapAdds, events, *flagMapWait)
	if full {
		if rest := *flagWindow - time.Since(s0.at); rest > 0 {
			time.Sleep(rest)
		}
	}
	s1 := take()
	if r.etcdCPU, r.profCPU, err = prof.stop(labelKey, labelEtcd); err != nil {
		fmt.Printf("  etcd's CPU not split from the bench's: %v\n", err)
	}
	r.window = s1.at.Sub(s0.at)
	r.ctrl = s1.ctrl.sub(s0.ctrl)
	r.ctrlCPU, r.apiCPU, r.selfCPU = s1.ctrlCPU-s0.ctrlCPU, s1.api-s0.api, s1.self-s0.self
	r.changes = s1.changes - s0.changes
	r.ctrlRSS, r.ctrlHW = ctrl.memory()
	if *flagHeap != "" {
		path := fmt.Sprintf("%s-%d.pprof", *flagHeap, nodes)
		if err := ctrl.saveHeap(path); err != nil {
			fmt.Printf("  controller heap profile: %v\n", err)
		} else {
			fmt.Printf("  controller heap profile in %s (go tool pprof -top -sample_index=inuse_space %s)\n", path, path)
		}
	}
	fmt.Printf("  window %v: %d pod changes, %d ADDs measured\n", r.window.Round(time.Millisecond), r.changes, r.adds.lat.N)

	if full {
		waitReleases(ctx, ctrl, r, leaked, gone, leakAt, goneAt)
	}
	stopChurn()
	cwg.Wait()
	r.churnFailed, r.churnBehind = ch.failed.Load(), ch.behind.Load()
	if e, ok := ch.firstErr.Load().(string); ok {
		r.churnErr = e
	}
	if full {
		quietAdds(ctx, r, pl, ap)
	}
	r.agentHW = ag.peakRSS()
	return r, nil
}

// waitReleases waits until the controller has released the leaked pods'
// allocations and the deleted nodes' (at most grace + 2 min), and records
// the times.
func waitReleases(ctx context.Context, ctrl *controller, r *result, leaked, gone []string, leakAt, goneAt time.Time) {
	limit := *flagGrace + 2*time.Minute
	_ = poll(ctx, limit, ctrl.exited, func() bool {
		rel := ctrl.releases()
		r.leaksReleased, r.nodesReleased = 0, 0
		for _, k := range leaked {
			if t, ok := rel[k]; ok {
				r.leaksReleased++
				r.leakRelease = max(r.leakRelease, t.Sub(leakAt))
			}
		}
		for _, n := range gone {
			if t, ok := rel["last:"+n]; ok {
				r.nodesReleased++
				r.nodeRelease = max(r.nodeRelease, t.Sub(goneAt))
			}
		}
		return r.leaksReleased == len(leaked) && r.nodesReleased == len(gone)
	})
	// A node's releases may continue after its first: wait for its pods'
	// last release to settle.
	time.Sleep(2 * time.Second)
	rel := ctrl.releases()
	for _, n := range gone {
		if t, ok := rel["last:"+n]; ok {
			r.nodeRelease = max(r.nodeRelease, t.Sub(goneAt))
		}
	}
}

// quietAdds measures, with the churn stopped, the measured nodes' API
// requests and the etcd's WAL bytes per ADD, each against an equal time
// without ADDs.
func quietAdds(ctx context.Context, r *result, pl *plugins, ap *meterProxy) {
	time.Sleep(3 * time.Second)
	w0, t0 := etcdMetrics()["etcd_disk_wal_write_bytes_total"], ap.snapshot()
	start := time.Now()
	var done []attachment
	for k := range *flagQuietAdds {
		a, err := pl.add(ctx, k%len(pl.nodes))
		if err == nil {
			done = append(done, a)
		}
	}
	took := time.Since(start)
	w1, t1 := etcdMetrics()["etcd_disk_wal_write_bytes_total"], ap.snapshot()
	time.Sleep(took)
	w2, t2 := etcdMetrics()["etcd_disk_wal_write_bytes_total"], ap.snapshot()
	for _, a := range done {
		_ = pl.del(ctx, a)
	}
	r.quietAdds = len(done)
	r.quietReqs, r.idleReqs = t1.sub(t0), t2.sub(t1)
	if len(done) > 0 {
		r.walPerAdd = ((w1 - w0) - (w2 - w1)) / float64(len(done))
	}
}

// selfCPU is this process's CPU time: the API server's etcd, the
// generator and churn, the proxies.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// keepLog copies a process's log into -logs.
func keepLog(p *proc, name string) {
	if *flagKeep == "" {
		return
	}
	if b, err := os.ReadFile(p.logPath); err == nil {
		_ = os.WriteFile(filepath.Join(*flagKeep, name), b, 0o644)
	}
}
