package allocator_test

import (
	"context"
	"fmt"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked/kvbackedtest"
	"github.com/ipkeeper/ipkeeper/test/bench/latency"
)

// BenchmarkAllocateDensity measures one allocator's dual-stack ADD and the
// DEL after it on the local file and the embedded etcd, on a node already
// holding 10 to 2 000 dual-stack pods: the allocator's own work per ADD
// (its edits of the node, the write's changes and checks) on top of the
// store's. It reports the ADD's and the DEL's median latency and the
// process's CPU time per ADD and DEL (user and system, the garbage
// collector's included), which the local file's fsync does not blur.
//
//	go test -run '^$' -bench AllocateDensity -benchtime 300x ./internal/allocator/
func BenchmarkAllocateDensity(b *testing.B) {
	for _, kvb := range kvbackedtest.KVBackends {
		for _, pods := range []int{10, 500, 2000} {
			b.Run(fmt.Sprintf("%s/pods=%d", kvb.Name, pods), func(b *testing.B) {
				benchAllocateDensity(b, kvb, pods)
			})
		}
	}
}

func benchAllocateDensity(b *testing.B, kvb kvbackedtest.KVBackend, pods int) {
	ctx := context.Background()
	s := kvbacked.New(kvb.Open(b))
	defer s.Close()
	a := allocator.New(s, nil)
	fillNode(b, a, pods)
	var adds, dels []time.Duration
	cpu0 := cpuTime()
	i := 0
	for b.Loop() {
		id := fmt.Sprintf("bench-%d", i)
		i++
		start := time.Now()
		h, err := a.Allocate(ctx, podRequest("node-a", id, "v4", "v6"))
		if err != nil {
			b.Fatal(err)
		}
		mid := time.Now()
		if _, err := a.Release(ctx, "node-a", h.ID); err != nil {
			b.Fatal(err)
		}
		adds, dels = append(adds, mid.Sub(start)), append(dels, time.Since(mid))
	}
	cpu := cpuTime() - cpu0
	b.ReportMetric(p50(adds), "add-p50-ms")
	b.ReportMetric(p50(dels), "del-p50-ms")
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(len(adds)), "cpu-ms/add+del")
}

// fillNode defines the dual-stack pools v4 and v6 and gives node-a pods
// dual-stack pods.
func fillNode(b *testing.B, a *allocator.Allocator, pods int) {
	b.Helper()
	ctx := context.Background()
	for _, p := range []ipam.Pool{
		{Name: "v4", CIDR: netip.MustParsePrefix("10.8.0.0/16"), BlockSize: 26},
		{Name: "v6", CIDR: netip.MustParsePrefix("fd00:8::/112"), BlockSize: 122},
	} {
		if _, err := a.EnsurePool(ctx, p); err != nil {
			b.Fatal(err)
		}
	}
	for i := range pods {
		if _, err := a.Allocate(ctx, podRequest("node-a", fmt.Sprintf("resident-%d", i), "v4", "v6")); err != nil {
			b.Fatal(err)
		}
	}
}

// p50 is the median of ds in milliseconds.
func p50(ds []time.Duration) float64 {
	return float64(latency.Percentile(ds, 50).Microseconds()) / 1000
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
