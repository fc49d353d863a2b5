package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/ipkeeper/ipkeeper/test/bench/latency"
)

// report prints the big cluster's figures with their goals, and the
// comparison with the small cluster's ADDs.
func report(b, small *result) {
	min := b.window.Minutes()
	fmt.Printf("\n== results: %d nodes, %d pods, %d addresses; steady window %v, %d pod changes (%.1f/s)",
		b.nodes, b.nodes*b.pods, 2*b.nodes*b.pods, b.window.Round(time.Second), b.changes, float64(b.changes)/b.window.Seconds())
	if b.churnFailed > 0 {
		fmt.Printf("; %d churn changes failed (first: %s)", b.churnFailed, b.churnErr)
	}
	if n := b.churnBehind; n > 0 {
		fmt.Printf("; %d churn ticks skipped (32 changes in flight)", n)
	}
	fmt.Println()
	how := "written into the API server's etcd"
	if !*flagDirect {
		how = "created through the API"
	}
	fmt.Printf("generation: %v (Node and Pod objects %s, allocations through the store)\n", b.gen.Round(time.Second), how)

	rate := float64(b.changes) / b.window.Seconds()
	byteGoal := 5e6 * max(rate, 1) / 10
	bytesMin := perMinute(float64(b.ctrl.bytesIn+b.ctrl.bytesOut), b.window)
	reqMin := perMinute(float64(b.ctrl.requests()), b.window)
	changesMin := float64(b.changes) / min
	var gs []goal
	gs = append(gs,
		goal{what: "controller API bytes/min (proxy, both ways)", value: fmt.Sprintf("%.2f MB", bytesMin/1e6),
			target: fmt.Sprintf("<= %.1f MB", byteGoal/1e6), met: bytesMin <= byteGoal, known: true},
		goal{what: "controller API requests/min", value: fmt.Sprintf("%.0f", reqMin),
			target: fmt.Sprintf("<= %.0f (changes/min)", changesMin), met: reqMin <= changesMin, known: true},
		goal{what: "controller memory (VmHWM; the map inside)", value: mib(float64(b.ctrlHW)),
			target: "<= 500 MB", met: b.ctrlHW <= 500e6, known: true},
		goal{what: "controller CPU/min", value: fmt.Sprintf("%.1f s", b.ctrlCPU.Seconds()/min), target: "none in the issue"},
	)
	leak := goal{what: fmt.Sprintf("leak to release (%d/%d leaked pods)", b.leaksReleased, *flagLeaks),
		value: b.leakRelease.Round(100 * time.Millisecond).String(), target: fmt.Sprintf("<= %v", *flagGrace+10*time.Second),
		met: b.leaksReleased == *flagLeaks && b.leakRelease <= *flagGrace+10*time.Second, known: *flagLeaks > 0}
	gs = append(gs, leak,
		goal{what: fmt.Sprintf("node deleted to its last release (%d/%d)", b.nodesReleased, *flagDeleteNodes),
			value: b.nodeRelease.Round(100 * time.Millisecond).String(), target: "none in the issue"},
		mapLoadGoal(b))
	mapMax := slices.Max(append([]time.Duration{0}, b.adds.mapLat...))
	gs = append(gs, goal{what: fmt.Sprintf("ADD to map event (max of %d; %d not in %v)", len(b.adds.mapLat), b.adds.mapMissed, *flagMapWait),
		value: mapMax.Round(10 * time.Millisecond).String(), target: "<= 1s",
		met: b.adds.mapMissed == 0 && mapMax <= time.Second, known: len(b.adds.mapLat)+b.adds.mapMissed > 0})
	p50 := latency.Percentile(b.adds.lat.Lat, 50)
	if small != nil && small.adds.lat.N > 0 && b.adds.lat.N > 0 {
		sp50 := latency.Percentile(small.adds.lat.Lat, 50)
		ratio := float64(p50) / float64(sp50)
		gs = append(gs, goal{what: fmt.Sprintf("ADD p50 %d nodes / %d nodes", b.nodes, small.nodes),
			value: fmt.Sprintf("%s / %s = %.2fx", ms(p50), ms(sp50), ratio), target: "<= 1.2x", met: ratio <= 1.2, known: true})
	} else {
		gs = append(gs, goal{what: "ADD p50", value: ms(p50), target: "<= 1.2x of 20 nodes"})
	}
	reqPerAdd := float64(b.quietReqs.requests()-b.idleReqs.requests()) / float64(max(b.quietAdds, 1))
	gs = append(gs,
		goal{what: fmt.Sprintf("API requests per warm ADD (%d ADDs)", b.quietAdds), value: fmt.Sprintf("%.2f", reqPerAdd),
			target: "1", met: reqPerAdd <= 1.0001, known: b.quietAdds > 0},
		goal{what: "API server CPU/min (all its clients)", value: fmt.Sprintf("%.1f s", b.apiCPU.Seconds()/min), target: "none in the issue"},
		goal{what: "etcd CPU/min (its goroutines' profile)", value: fmt.Sprintf("%.1f s", b.etcdCPU.Seconds()/min), target: "none in the issue"},
		goal{what: "etcd WAL bytes written per ADD", value: fmt.Sprintf("%.0f B", b.walPerAdd), target: "none in the issue"},
	)
	fmt.Println()
	for _, g := range gs {
		fmt.Println(g)
	}

	fmt.Printf("\ncontroller API requests and bytes (both ways) in the window, by verb and resource (%.2f MB received, %.2f MB sent):\n",
		float64(b.ctrl.bytesOut)/1e6, float64(b.ctrl.bytesIn)/1e6)
	printKinds(b.ctrl)
	fmt.Printf("measured nodes' API requests over %d quiet ADDs (and the same time without):\n", b.quietAdds)
	printKinds(b.quietReqs)
	if n := b.idleReqs.requests(); n > 0 {
		printKinds(b.idleReqs)
	}
	fmt.Printf("ADD during churn: %d ok, %d failed, p50 %s, p90 %s, max %s", b.adds.lat.N, b.adds.failed,
		ms(p50), ms(b.adds.lat.Pct(90)), ms(b.adds.lat.Pct(100)))
	if b.adds.firstErr != "" {
		fmt.Printf(" (first error: %s)", b.adds.firstErr)
	}
	fmt.Println()
	if len(b.adds.mapLat) > 0 {
		fmt.Printf("ADD to map event: p50 %s, max %s over %d ADDs\n", ms(latency.Percentile(b.adds.mapLat, 50)), ms(mapMax), len(b.adds.mapLat))
	}
	fmt.Printf("controller: RSS now %s, peak %s; ready and first pass %v; agents' peak RSS %s\n",
		mib(float64(b.ctrlRSS)), mib(float64(b.ctrlHW)), b.ready.Round(time.Millisecond), mib(float64(b.agentHW)))
	fmt.Printf("this process (etcd, churn, proxies) %.1f s CPU/min: %.1f s in the profile's samples, %.1f s of them etcd's\n",
		b.selfCPU.Seconds()/min, b.profCPU.Seconds()/min, b.etcdCPU.Seconds()/min)
	if small != nil {
		fmt.Printf("comparison cluster (%d nodes): ADD p50 %s over %d ADDs (%d failed), map load %v, generation %v\n",
			small.nodes, ms(latency.Percentile(small.adds.lat.Lat, 50)), small.adds.lat.N, small.adds.failed,
			small.mapLoad.Round(10*time.Millisecond), small.gen.Round(time.Second))
	}
}

// printKinds prints t's requests and bytes by kind; a watch opened
// before t's start shows its bytes with no request.
func printKinds(t traffic) {
	keys := make([]string, 0, len(t.byKind))
	for k := range t.byKind {
		keys = append(keys, k)
	}
	for k := range t.bytesByKind {
		if _, ok := t.byKind[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Printf("    %-36s %6d requests %10.3f MB\n", k, t.byKind[k], float64(t.bytesByKind[k])/1e6)
	}
}

// goalNodes is the scale of the goals: 5 000 nodes x 110 pods (550 000
// pods, the "550 000 addresses").
const goalNodes = 5000

// mapLoadGoal judges the map's first load: below the goal's scale, by the
// time projected linearly to it (a full read is linear in the nodes).
func mapLoadGoal(b *result) goal {
	g := goal{what: "map first full load (controller start)", value: b.mapLoad.Round(10 * time.Millisecond).String(),
		target: "<= 10s at 5 000 nodes", known: true}
	projected := b.mapLoad
	if b.nodes < goalNodes {
		projected = time.Duration(float64(b.mapLoad) * goalNodes / float64(b.nodes))
		g.value += fmt.Sprintf(" (%s at 5 000)", projected.Round(time.Second))
	}
	g.met = projected <= 10*time.Second
	return g
}
