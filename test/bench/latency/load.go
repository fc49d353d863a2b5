// Package latency runs operations for the benchmark programs and sums them
// up: latencies of operations run by concurrent workers for a while, or
// one after another, with their rate and percentiles.
package latency

import (
	"fmt"
	"log"
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

// Pct is the p-th percentile (0..100) of the latencies, 0 without any.
func (r Result) Pct(p float64) time.Duration {
	if len(r.Lat) == 0 {
		return 0
	}
	s := slices.Clone(r.Lat)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p/100)]
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
