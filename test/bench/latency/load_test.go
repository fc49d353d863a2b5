package latency

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	seq := func(n int) []time.Duration { // n..1, unsorted on purpose
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = time.Duration(n - i)
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		samples []time.Duration
		p       float64
		want    time.Duration
	}{
		{"none", nil, 50, 0},
		{"single p0", seq(1), 0, 1},
		{"single p50", seq(1), 50, 1},
		{"single p99", seq(1), 99, 1},
		{"p0 is the fastest", []time.Duration{5, 1, 4, 2, 3}, 0, 1},
		{"negative p is the fastest", []time.Duration{5, 1, 4}, -10, 1},
		{"odd median is the middle", []time.Duration{5, 1, 4, 2, 3}, 50, 3},
		{"even median is the lower middle", []time.Duration{4, 1, 3, 2}, 50, 2},
		{"p99 of 5 is the slowest", []time.Duration{5, 1, 4, 2, 3}, 99, 5},
		{"p99 of 10 is the slowest", seq(10), 99, 10},
		{"p100 is the slowest", []time.Duration{5, 1, 4, 2, 3}, 100, 5},
		{"p above 100 is the slowest", []time.Duration{5, 1, 4}, 150, 5},
		{"p90 of 1..100", seq(100), 90, 90},
		{"p99 of 1..100", seq(100), 99, 99},
		{"p just above a rank takes the next", seq(100), 90.5, 91},
		{"p99.9 of 1..1000", seq(1000), 99.9, 999},
		{"p1.1 of 1..3000: a whole rank is not rounded up", seq(3000), 1.1, 33},
		{"duplicates", []time.Duration{2, 2, 2, 1}, 50, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.samples)
			if got := Percentile(tc.samples, tc.p); got != tc.want {
				t.Errorf("Percentile(p%v) = %v, want %v", tc.p, got, tc.want)
			}
			if !slices.Equal(in, tc.samples) {
				t.Errorf("Percentile reordered its samples: %v, was %v", tc.samples, in)
			}
		})
	}
	r := Result{N: 5, Wall: time.Second, Lat: []time.Duration{5, 1, 4, 2, 3}}
	if r.Pct(50) != 3 || r.Pct(99) != 5 {
		t.Errorf("Result.Pct: p50 %v, p99 %v; want 3 and 5 (Percentile of its latencies)", r.Pct(50), r.Pct(99))
	}
	if r.Rate() != 5 {
		t.Errorf("Rate = %v, want 5", r.Rate())
	}
}

func TestTimesStopsAtError(t *testing.T) {
	boom := errors.New("boom")
	r, err := Times(10, func(i int) error {
		if i == 3 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || len(r.Lat) != 3 {
		t.Fatalf("Times: %d latencies, %v; want 3 and boom", len(r.Lat), err)
	}
}

func TestMeasureCountsSuccessesOnly(t *testing.T) {
	r := Measure(2, 20*time.Millisecond, func(w, i int) error {
		if i%2 == 1 {
			return errors.New("odd")
		}
		return nil
	})
	if r.N == 0 || r.N != len(r.Lat) {
		t.Fatalf("Measure: N %d, %d latencies", r.N, len(r.Lat))
	}
}
