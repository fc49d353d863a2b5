package main

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	for _, tc := range []struct {
		name    string
		samples []time.Duration
		p       int
		want    time.Duration
	}{
		{"single", ms(7), 50, 7 * time.Millisecond},
		{"single p99", ms(7), 99, 7 * time.Millisecond},
		{"odd median", ms(1, 2, 3), 50, 2 * time.Millisecond},
		{"even median is the lower middle", ms(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{"p90 of 1..100", ms(hundred...), 90, 90 * time.Millisecond},
		{"p99 of 1..100", ms(hundred...), 99, 99 * time.Millisecond},
		{"p99 of 10 is the max", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 99, 10 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := percentile(tc.samples, tc.p); got != tc.want {
				t.Fatalf("p%d = %v, want %v", tc.p, got, tc.want)
			}
		})
	}
	s := summarize(ms(5, 1, 3))
	if s.n != 3 || s.median != 3*time.Millisecond || s.fastest != time.Millisecond || s.slowest != 5*time.Millisecond {
		t.Fatalf("summarize sorted wrongly: %+v", s)
	}
}
