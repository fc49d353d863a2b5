package main

import (
	"math"
	"slices"
	"testing"
	"time"
)

// split hands out every pod once, in order, in the rounds asked for.
func TestSplit(t *testing.T) {
	for _, c := range []struct{ n, rounds int }{{10, 4}, {320, 4}, {3, 4}, {1, 1}, {0, 2}, {17, 16}} {
		pods := make([]int, c.n)
		for i := range pods {
			pods[i] = 100 + i
		}
		parts := split(pods, c.rounds)
		if len(parts) != c.rounds {
			t.Fatalf("split(%d pods, %d): %d parts", c.n, c.rounds, len(parts))
		}
		if got := slices.Concat(parts...); !slices.Equal(got, pods) && (len(got) > 0 || len(pods) > 0) {
			t.Fatalf("split(%d pods, %d): parts %v put together are %v", c.n, c.rounds, parts, got)
		}
	}
}

// add sums two runs of one plugin and keeps the first error seen.
func TestOutcomeAdd(t *testing.T) {
	var o outcome
	o.add(outcome{Errors: 1, FirstErr: "first"})
	o.Result.N, o.Result.Wall, o.Result.Lat = 1, time.Second, []time.Duration{time.Second}
	o.add(outcome{Errors: 2, FirstErr: "second"})
	o.add(outcome{})
	b := outcome{}
	b.N, b.Wall, b.Lat, b.CPU = 2, 3*time.Second, []time.Duration{time.Millisecond, 2 * time.Millisecond}, time.Millisecond
	o.add(b)
	o.add(b)
	if o.N != 5 || o.Wall != 7*time.Second || len(o.Lat) != 5 || o.CPU != 2*time.Millisecond || o.Errors != 3 || o.FirstErr != "first" {
		t.Fatalf("added outcome: %+v", o)
	}
	if r := (row{by: map[string]*outcome{"calico": &o, "ipkeeper": &b}}).rateRatio(); math.Abs(r-14.0/15) > 1e-12 {
		t.Fatalf("rate ratio %v, want ipkeeper's rate over Calico's", r)
	}
}
