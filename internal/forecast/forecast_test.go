package forecast

import (
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// TestSeconds: free addresses divided by the net rate; 0 for a full pool
// whatever the rate; +Inf when the pool is not filling. IPv4 and IPv6
// pools side by side (an IPv6 pool's usable count is near 2^64).
func TestSeconds(t *testing.T) {
	v4 := ipam.Pool{Name: "v4", CIDR: netip.MustParsePrefix("10.1.0.0/24"), BlockSize: 28}
	v6 := ipam.Pool{Name: "v6", CIDR: netip.MustParsePrefix("fd01::/64"), BlockSize: 122}
	inf := math.Inf(1)
	for _, tc := range []struct {
		name       string
		free, rate float64
		want       float64
	}{
		{"v4 filling", float64(v4.Usable()) - 56, 2, (float64(v4.Usable()) - 56) / 2},
		{"v6 filling", float64(v6.Usable()), 1 << 20, float64(v6.Usable()) / (1 << 20)},
		{"v4 steady", 200, 0, inf},
		{"v6 steady", float64(v6.Usable()), 0, inf},
		{"v4 draining", 200, -3, inf},
		{"v6 draining", float64(v6.Usable()) - 10, -0.5, inf},
		{"v4 full", 0, 5, 0},
		{"v6 full", 0, 5, 0},
		{"v4 full and draining", 0, -5, 0},
		{"v6 full and steady", 0, 0, 0},
		{"NaN rate", 10, math.NaN(), inf},
		{"last address at one per minute", 1, 1.0 / 60, 60},
	} {
		if got := Seconds(tc.free, tc.rate); got != tc.want {
			t.Errorf("%s: Seconds(%v, %v) = %v, want %v", tc.name, tc.free, tc.rate, got, tc.want)
		}
	}
}

// TestWindowEstimate: the net rate runs from the oldest sample held to the
// newest; samples older than the window go, except the one just before
// its start; without two samples there is no estimate, unless the pool is
// full.
func TestWindowEstimate(t *testing.T) {
	type obs struct {
		after time.Duration
		inUse float64
	}
	inf := math.Inf(1)
	for _, tc := range []struct {
		name     string
		span     time.Duration
		obs      []obs
		free     float64
		ok       bool
		seconds  float64
		rate     float64
		spanWant time.Duration
	}{
		{name: "one sample", obs: []obs{{0, 10}}, free: 100, ok: false},
		{name: "one sample, full", obs: []obs{{0, 256}}, free: 0, ok: true, seconds: 0},
		{name: "v4 filling 1/s", obs: []obs{{0, 10}, {time.Minute, 70}}, free: 180, ok: true,
			seconds: 180, rate: 1, spanWant: time.Minute},
		{name: "v6 filling 100/s", obs: []obs{{0, 0}, {10 * time.Second, 1000}}, free: float64(1 << 62), ok: true,
			seconds: float64(1<<62) / 100, rate: 100, spanWant: 10 * time.Second},
		{name: "steady", obs: []obs{{0, 50}, {time.Minute, 60}, {2 * time.Minute, 50}}, free: 200, ok: true,
			seconds: inf, rate: 0, spanWant: 2 * time.Minute},
		{name: "draining", obs: []obs{{0, 90}, {time.Minute, 30}}, free: 200, ok: true,
			seconds: inf, rate: -1, spanWant: time.Minute},
		{name: "full while draining", obs: []obs{{0, 90}, {time.Minute, 30}}, free: 0, ok: true,
			seconds: 0, rate: -1, spanWant: time.Minute},
		// 10-minute window: at 21m the samples at 0, 5m and 10m go, as
		// the one at 11m is at the window's start; the rate runs from 11m.
		{name: "old samples go", span: 10 * time.Minute,
			obs:  []obs{{0, 0}, {5 * time.Minute, 1000}, {10 * time.Minute, 1000}, {11 * time.Minute, 1000}, {21 * time.Minute, 1660}},
			free: 6600, ok: true, seconds: 6000, rate: 1.1, spanWant: 10 * time.Minute},
		{name: "clock went back", obs: []obs{{time.Hour, 0}, {2 * time.Hour, 3600}, {0, 5}}, free: 10, ok: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := Window{Span: tc.span}
			for _, o := range tc.obs {
				w.Add(t0.Add(o.after), o.inUse)
			}
			e, ok := w.Estimate(tc.free)
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v (estimate %+v)", ok, tc.ok, e)
			}
			if !ok {
				return
			}
			if !near(e.Seconds, tc.seconds) || math.Abs(e.Rate-tc.rate) > 1e-9 || e.Span != tc.spanWant {
				t.Errorf("estimate %+v, want seconds %v rate %v span %v", e, tc.seconds, tc.rate, tc.spanWant)
			}
		})
	}
}

// TestWindowBounded: a sample every second for a day keeps a few dozen
// samples, and the rate spans the window.
func TestWindowBounded(t *testing.T) {
	var w Window
	for i := range 24 * 3600 {
		w.Add(t0.Add(time.Duration(i)*time.Second), float64(i))
	}
	if n := len(w.samples); n > maxSamples+2 {
		t.Errorf("%d samples held, want at most %d", n, maxSamples+2)
	}
	rate, span, ok := w.Rate()
	if !ok || math.Abs(rate-1) > 1e-9 || span < DefaultWindow || span > DefaultWindow+DefaultWindow/maxSamples {
		t.Errorf("rate %v over %v (ok %v), want 1/s over about %v", rate, span, ok, DefaultWindow)
	}
}

func TestWithin(t *testing.T) {
	for _, tc := range []struct {
		e    Estimate
		d    time.Duration
		want bool
	}{
		{Estimate{Seconds: 3599}, time.Hour, true},
		{Estimate{Seconds: 3600}, time.Hour, true},
		{Estimate{Seconds: 3601}, time.Hour, false},
		{Estimate{Seconds: 0}, time.Hour, true},
		{Estimate{Seconds: math.Inf(1)}, 1000 * time.Hour, false},
	} {
		if got := tc.e.Within(tc.d); got != tc.want {
			t.Errorf("%+v.Within(%v) = %v, want %v", tc.e, tc.d, got, tc.want)
		}
	}
}

// near compares forecasts to a relative 1e-9 (infinities exactly).
func near(a, b float64) bool {
	if math.IsInf(a, 0) || math.IsInf(b, 0) || b == 0 {
		return a == b
	}
	return math.Abs(a-b) <= 1e-9*math.Abs(b)
}
