package main

import (
	"fmt"
	"log"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// result is a throughput run: operations, wall time, latencies.
type result struct {
	n    int
	wall time.Duration
	lat  []time.Duration
}

func (r result) rate() float64 { return float64(r.n) / r.wall.Seconds() }

func (r result) pct(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	s := slices.Clone(r.lat)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p/100)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000) }

// measure runs op from c workers for d and collects the latencies of the
// operations that succeeded.
func measure(c int, d time.Duration, op func(w, i int) error) result {
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
	return result{n: len(lats), wall: time.Since(start), lat: lats}
}

// times runs op n times in a row and collects the latencies.
func times(n int, op func(i int) error) (result, error) {
	var r result
	start := time.Now()
	for i := range n {
		t0 := time.Now()
		if err := op(i); err != nil {
			return r, err
		}
		r.lat = append(r.lat, time.Since(t0))
	}
	r.n, r.wall = n, time.Since(start)
	return r, nil
}
