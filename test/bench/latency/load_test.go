package latency

import (
	"errors"
	"testing"
	"time"
)

func TestPct(t *testing.T) {
	r := Result{N: 5, Wall: time.Second, Lat: []time.Duration{5, 1, 4, 2, 3}}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{0, 1}, {50, 3}, {99, 4}, {100, 5}} {
		if got := r.Pct(c.p); got != c.want {
			t.Errorf("Pct(%v) = %v, want %v", c.p, got, c.want)
		}
	}
	if r.Rate() != 5 {
		t.Errorf("Rate = %v, want 5", r.Rate())
	}
	if (Result{}).Pct(50) != 0 {
		t.Error("Pct of no latencies is not 0")
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
