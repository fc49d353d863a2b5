package main

import (
	"slices"
	"time"

	"github.com/ipkeeper/ipkeeper/test/bench/latency"
)

// summary is the latency distribution of one operation.
type summary struct {
	n                int
	median, p90, p99 time.Duration
	fastest, slowest time.Duration
}

// summarize computes the percentiles of samples (latency.Percentile).
func summarize(samples []time.Duration) summary {
	if len(samples) == 0 {
		return summary{}
	}
	return summary{
		n:       len(samples),
		median:  latency.Percentile(samples, 50),
		p90:     latency.Percentile(samples, 90),
		p99:     latency.Percentile(samples, 99),
		fastest: slices.Min(samples),
		slowest: slices.Max(samples),
	}
}
