// Package latency runs operations for the benchmark programs and sums them
// up: latencies of operations run by concurrent workers for a while, or
// one after another, with their rate and percentiles.
package latency

import (
	"fmt"
	"log"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Result is a run: operations that succeeded, wall time, their latencies.
type Result struct {
	N    int
	Wall time.Duration
	Lat  []time.Duration
}

// Rate is operations per second of wall time.
func (r Result) Rate() float64 { return float64(r.N) / r.Wall.Seconds() }

// Pct is the p-th percentile of the latencies (Percentile).
func (r Result) Pct(p float64) time.Duration { return Percentile(r.Lat, p) }

// Percentile is the nearest-rank p-th percentile (p in 0..100) of samples,
// which need not be sorted: the smallest sample with at least p% of the
// samples at or below it, the sample of rank ceil(p/100 × n) counted from
// 1. It is always one of the samples, never an interpolation: the median
// of an even count is the lower middle, and a p99 of fewer than 100
// samples is the slowest. p ≤ 0 gives the fastest, p ≥ 100 the slowest,
// no samples 0.
func Percentile(samples []time.Duration, p float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	// The small subtraction keeps a rank that is a whole number in decimal
	// (p1.1 of 3000 samples: 33) from being rounded up past it when the
	// binary product comes out a hair above it.
	rank := int(math.Ceil(p*float64(len(s))/100 - 1e-9))
	return s[min(max(rank, 1), len(s))-1]
}

// Ms prints d in milliseconds with two decimals.
func Ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000) }

// Measure runs op from c workers for d (w is the worker, i its count) and
// collects the latencies of the operations that succeeded; the first
// failure is logged.
func Measure(c int, d time.Duration, op func(w, i int) error) Result {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		lats []time.Duration
		fail atomic.Int64
	)
	stop := time.Now().Add(d)
	start := time.Now()
	for w := range c {
		wg.Go(func() {
			var mine []time.Duration
			for i := 0; time.Now().Before(stop); i++ {
				t0 := time.Now()
				if err := op(w, i); err != nil {
					if fail.Add(1) == 1 {
						log.Printf("worker %d: %v", w, err)
					}
					continue
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return Result{N: len(lats), Wall: time.Since(start), Lat: lats}
}

// Times runs op n times in a row and collects the latencies; it stops at
// the first error.
func Times(n int, op func(i int) error) (Result, error) {
	var r Result
	start := time.Now()
	for i := range n {
		t0 := time.Now()
		if err := op(i); err != nil {
			return r, err
		}
		r.Lat = append(r.Lat, time.Since(t0))
	}
	r.N, r.Wall = n, time.Since(start)
	return r, nil
}
