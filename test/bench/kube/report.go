package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/ipkeeper/ipkeeper/test/bench/latency"
)

func jsonConf(v any) ([]byte, error) { return json.Marshal(v) }

// printHeader prints the column names; the last five are per ADD call:
// CPU of the plugin processes (ipkeeper-kube included), of the
// ipkeeper-agents, of the kube-apiserver, of this process (the API
// server's etcd and the harness), and resource requests the API server
// served.
func printHeader() {
	fmt.Printf("%-22s %5s %11s %8s %9s %9s %8s %9s %10s %9s %10s %9s %8s  %s\n", "mode", "conc", "ADD ok/n", "ADD/s", "ADD p50", "ADD p99",
		"DEL/s", "DEL p50", "plugin CPU", "agent CPU", "apisrv CPU", "etcd+rest", "API req", "notes")
}

func printRow(r cellResult) {
	var notes []string
	note := func(what string, p phase) {
		if p.timedOut {
			notes = append(notes, fmt.Sprintf("%s cut off at the limit after %d of %d", what, p.res.N, p.attempts))
		}
		if p.failed > 0 {
			notes = append(notes, fmt.Sprintf("%d %s failed, first: %s", p.failed, what, p.firstErr))
		}
	}
	note("ADD", r.add)
	note("DEL", r.del)
	if r.dups > 0 {
		notes = append(notes, fmt.Sprintf("%d addresses handed out twice", r.dups))
	}
	if r.clean != "" {
		notes = append(notes, "cleanup: "+r.clean)
	}
	if len(r.unsettled) > 0 {
		notes = append(notes, fmt.Sprintf("%s started on a busy machine (not %.0f%% idle within %v)",
			strings.Join(r.unsettled, ", "), settleIdle*100, settleMax))
	}
	calls := float64(r.add.res.N + r.add.failed)
	per := func(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000/calls) }
	c := r.add.cost
	fmt.Printf("%-22s %5d %11s %8s %9s %9s %8s %9s %10s %9s %10s %9s %8.1f  %s\n", r.mode, r.conc, fmt.Sprintf("%d/%d", r.add.res.N, r.add.attempts),
		rate(r.add.res), ms(r.add.res, 50), ms(r.add.res, 99), rate(r.del.res), ms(r.del.res, 50),
		per(c.plugin), per(c.agents), per(c.apiserver), per(c.self), c.requests()/calls, strings.Join(notes, "; "))
	if *flagRequests && calls > 0 && len(c.byKind) > 0 {
		kinds := slices.Sorted(maps.Keys(c.byKind))
		parts := make([]string, len(kinds))
		for i, k := range kinds {
			parts[i] = fmt.Sprintf("%s %.2f", k, c.byKind[k]/calls)
		}
		fmt.Printf("%-22s requests per ADD: %s\n", "", strings.Join(parts, ", "))
	}
}

// printCPUBound prints what the phase's ADDs cost this machine's CPUs in
// all, and the ADD rate that cost allows at most with every CPU busy.
func printCPUBound(r cellResult) {
	calls := float64(r.add.res.N + r.add.failed)
	if calls == 0 || r.add.cost.total() <= 0 {
		return
	}
	per := r.add.cost.total().Seconds() / calls
	cpus := runtime.NumCPU()
	fmt.Printf("CPU per ADD, all processes: %.1fms -> at most %.0f ADD/s on this machine's %d CPUs, %.1fs for these %d ADDs\n",
		per*1000, float64(cpus)/per, cpus, per*calls/float64(cpus), int(calls))
}

// rate is a phase's calls/s, "-" without any.
func rate(r latency.Result) string {
	if r.N == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", r.Rate())
}

// ms is a phase's p-th percentile, "-" without any call.
func ms(r latency.Result, p float64) string {
	if r.N == 0 {
		return "-"
	}
	return latency.Ms(r.Pct(p))
}

// printGoals prints the goal ratios (against whereabouts and the etcd
// backend) from the cells that ran.
func printGoals(results map[string]map[int]cellResult, waName string, concs []int, cold *cellResult) {
	fmt.Println("\ngoals:")
	etcd, wa := results[modeEtcd], results[waName]
	for _, name := range []string{modeKube, modeAgent} {
		kube := results[name]
		if kube == nil {
			continue
		}
		if wa != nil && slices.Contains(concs, 8) {
			k, w := kube[8].add.res.Rate(), wa[8].add.res.Rate()
			fmt.Printf("  ADD/s at concurrency 8, %s / %s: %.1f / %.1f = %.1fx (goal >= 20x)\n", name, waName, k, w, k/w)
			if name == modeAgent && cold != nil {
				k := cold.add.res.Rate()
				fmt.Printf("    the same on fresh nodes and a fresh pool (%s): %.1f / %.1f = %.1fx\n", cold.mode, k, w, k/w)
			}
		} else {
			fmt.Printf("  ADD/s ratio of %s to whereabouts at concurrency 8: not measured (needs both modes and -conc with 8)\n", name)
		}
		if etcd != nil {
			for _, c := range concs {
				k, e := kube[c].add.res.Pct(50), etcd[c].add.res.Pct(50)
				fmt.Printf("  ADD p50 at concurrency %d, %s / %s: %s / %s = %.2fx (goal <= 2x)\n", c, name, modeEtcd,
					latency.Ms(k), latency.Ms(e), float64(k)/float64(e))
			}
		}
	}
}
