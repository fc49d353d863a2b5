package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/ipkeeper/ipkeeper/test/bench/latency"
)

// errBadAnswer means a line from the Calico side is not an answer.
var errBadAnswer = errors.New("bad answer from the calico side")

// outcome is one side's measurement of one workload: the successful
// operations' latencies and wall time, the failed operations, and what
// the workload wrote into etcd.
type outcome struct {
	latency.Result
	Errors   int
	FirstErr string
	// Bytes is the sum of the value sizes of the puts under the side's
	// prefix during the workload (deletes count nothing).
	Bytes int64
	// Puts counts those puts.
	Puts int64
	// DBGrowth is etcd's database size after the workload less its size
	// before (both etcd's reported total size; history not compacted
	// during the workload, compacted and defragmented before it).
	DBGrowth int64
}

// answer is the Calico side's JSON line (test/bench/calico/side).
type answer struct {
	Lat      []int64 `json:"lat"`
	WallNS   int64   `json:"wallNs"`
	Errors   int     `json:"errors"`
	FirstErr string  `json:"firstErr,omitempty"`
	Version  string  `json:"version,omitempty"`
}

// parseAnswer turns one line of the Calico side's output into an outcome.
func parseAnswer(line []byte) (outcome, string, error) {
	var a answer
	if err := json.Unmarshal(line, &a); err != nil {
		return outcome{}, "", fmt.Errorf("%w: %v: %.200q", errBadAnswer, err, line)
	}
	if a.WallNS < 0 || a.Errors < 0 {
		return outcome{}, "", fmt.Errorf("%w: negative wall time or error count: %.200q", errBadAnswer, line)
	}
	o := outcome{Errors: a.Errors, FirstErr: a.FirstErr}
	o.N = len(a.Lat)
	o.Wall = time.Duration(a.WallNS)
	o.Lat = make([]time.Duration, len(a.Lat))
	for i, ns := range a.Lat {
		o.Lat[i] = time.Duration(ns)
	}
	return o, a.Version, nil
}

// perOp is total/n, or NaN when nothing was done.
func perOp(total int64, n int) float64 {
	if n <= 0 {
		return math.NaN()
	}
	return float64(total) / float64(n)
}

// ratio is a/b, or NaN when b is not positive.
func ratio(a, b float64) float64 {
	if !(b > 0) {
		return math.NaN()
	}
	return a / b
}

// fmtBytes prints a byte count with a binary unit.
func fmtBytes(b float64) string {
	switch {
	case math.IsNaN(b):
		return "-"
	case math.Abs(b) >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case math.Abs(b) >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	default:
		return fmt.Sprintf("%.0f B", b)
	}
}

// fmtRatio prints a ratio as "12.3x", or "-" when it is not a number.
func fmtRatio(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return "-"
	}
	return fmt.Sprintf("%.2fx", r)
}

// fmtRate prints operations per second, or "-" for nothing measured.
func fmtRate(o *outcome) string {
	if o == nil || o.Wall <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f/s", o.Rate())
}
