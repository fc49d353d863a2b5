package main

import (
	"slices"
	"time"
)

// summary is the latency distribution of one operation.
type summary struct {
	n                int
	median, p90, p99 time.Duration
	fastest, slowest time.Duration
}

// summarize computes nearest-rank percentiles of samples.
func summarize(samples []time.Duration) summary {
	if len(samples) == 0 {
		return summary{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	return summary{
		n:       len(s),
		median:  percentile(s, 50),
		p90:     percentile(s, 90),
		p99:     percentile(s, 99),
		fastest: s[0],
		slowest: s[len(s)-1],
	}
}

// percentile returns the nearest-rank p-th percentile of sorted samples:
// the smallest sample with at least p% of samples at or below it.
func percentile(sorted []time.Duration, p int) time.Duration {
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 * n)
	return sorted[max(rank, 1)-1]
}
