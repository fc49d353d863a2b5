package webui

import (
	"log/slog"
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/forecast"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// TestPoolForecast: the map forecasts each pool's exhaustion from the
// addresses in use it saw change: nothing before a rate is known, free
// over the net rate while a pool fills (marked when within a day), 0 once
// full, no time while it drains. IPv4 and IPv6 pools side by side.
func TestPoolForecast(t *testing.T) {
	m := newModel(slog.New(slog.DiscardHandler))
	start := time.Date(2026, 5, 6, 7, 8, 0, 0, time.UTC)
	now := start
	m.now = func() time.Time { return now }
	m.replace(snapshot{rev: 1, pools: []store.Pool{{Spec: poolTiny, Version: "1"}, {Spec: poolV6, Version: "2"}}})
	f := newNodeFeed(m)
	v6blk := netip.MustParsePrefix("fd00:10::/122")
	handle := func(i int, p ipam.Pool, blk netip.Prefix) ipam.Handle {
		a := blk.Addr()
		for range i {
			a = a.Next()
		}
		return ipam.Handle{ID: "h" + a.String(), Node: "node-a", IPs: []ipam.HandleIP{{Addr: a, Pool: p.Name, Block: blk}}}
	}
	pools := func() map[string]poolView {
		out := map[string]poolView{}
		for _, pv := range m.buildOverview().Pools {
			out[pv.Name] = pv
		}
		return out
	}
	for name, pv := range pools() {
		if pv.ExhaustionSeconds != nil || pv.RunsOut || pv.ForecastWindow != 0 {
			t.Errorf("pool %s after one read: %+v, want no forecast", name, pv)
		}
	}

	// A minute later: two addresses in the tiny pool, one in the /64.
	now = start.Add(time.Minute)
	f.put("node-a", handle(0, poolTiny, poolTiny.CIDR))
	f.put("node-a", handle(1, poolTiny, poolTiny.CIDR))
	f.put("node-a", handle(0, poolV6, v6blk))
	ps := pools()
	tiny, v6 := ps[poolTiny.Name], ps[poolV6.Name]
	wantTiny := (float64(poolTiny.Usable()) - 2) / (2.0 / 60)
	if tiny.ExhaustionSeconds == nil || math.Abs(*tiny.ExhaustionSeconds-wantTiny) > 1e-6 || !tiny.RunsOut ||
		tiny.ForecastWindow != 60 || math.Abs(tiny.NetRate-2.0/60) > 1e-12 {
		t.Errorf("tiny pool filling at 2/min: %+v, want exhaustion in %v s, marked", tiny, wantTiny)
	}
	wantV6 := (float64(poolV6.Usable()) - 1) / (1.0 / 60)
	if v6.ExhaustionSeconds == nil || math.Abs(*v6.ExhaustionSeconds-wantV6) > 1e-6*wantV6 || v6.RunsOut {
		t.Errorf("/64 filling at 1/min: %+v, want exhaustion in %v s, not marked", v6, wantV6)
	}

	// The tiny pool fills up.
	now = start.Add(2 * time.Minute)
	for i := 2; i < int(poolTiny.Usable()); i++ {
		f.put("node-a", handle(i, poolTiny, poolTiny.CIDR))
	}
	if tiny := pools()[poolTiny.Name]; tiny.ExhaustionSeconds == nil || *tiny.ExhaustionSeconds != 0 || !tiny.RunsOut {
		t.Errorf("full tiny pool: %+v, want exhaustion 0, marked", tiny)
	}

	// Everything in the /64 released: it drains.
	now = start.Add(3 * time.Minute)
	f.del(handle(0, poolV6, v6blk).ID)
	if v6 := pools()[poolV6.Name]; v6.ExhaustionSeconds != nil || v6.RunsOut || v6.NetRate != 0 || v6.ForecastWindow != 180 {
		t.Errorf("drained /64: %+v, want no exhaustion time over a 180 s window", v6)
	}
}

// TestPoolForecastMark: a pool is marked when forecast to run out within
// a day, not later.
func TestPoolForecastMark(t *testing.T) {
	m := newModel(slog.New(slog.DiscardHandler))
	for _, tc := range []struct {
		in   time.Duration
		want bool
	}{{23 * time.Hour, true}, {24 * time.Hour, true}, {25 * time.Hour, false}, {30 * 24 * time.Hour, false}} {
		m.forecasts["p"] = &poolForecast{ok: true, est: forecast.Estimate{Seconds: tc.in.Seconds(), Rate: 1, Span: time.Hour}}
		pv := poolView{Name: "p"}
		m.setForecast(&pv)
		if pv.RunsOut != tc.want || pv.ExhaustionSeconds == nil || *pv.ExhaustionSeconds != tc.in.Seconds() {
			t.Errorf("forecast %v: %+v, want marked %v", tc.in, pv, tc.want)
		}
	}
}
