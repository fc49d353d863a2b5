package webui

import (
	"math"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/forecast"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// runsOutWithin is how soon a pool must be forecast to run out for the
// map to mark it.
const runsOutWithin = 24 * time.Hour

// poolForecast is the map's exhaustion forecast of one pool: the window
// of its addresses in use as the mirror saw them change, and the estimate
// at the last change (the same arithmetic as the controller's
// ipkeeper_pool_exhaustion_seconds, on what the map observes).
type poolForecast struct {
	w   forecast.Window
	est forecast.Estimate
	ok  bool
	// usable is the pool's usable addresses at version (a scan of the
	// pool, not repeated for every change of its blocks).
	usable  float64
	version store.Version
}

// forecastLocked samples, at now, the addresses in use of every pool
// whose blocks d names, and estimates when each runs out. m.mu must be
// held for writing.
func (m *model) forecastLocked(d *dirty, now time.Time) {
	touched := map[string]bool{}
	for name := range d.pools {
		touched[name] = true
	}
	for ref := range d.blocks {
		touched[ref.Pool] = true
	}
	for name := range touched {
		ps := m.pools[name]
		if ps == nil {
			delete(m.forecasts, name)
			continue
		}
		inUse := 0
		for _, b := range m.byPool[name] {
			inUse += b.agg.inUse
		}
		f := m.forecasts[name]
		if f == nil {
			f = &poolForecast{}
			m.forecasts[name] = f
		}
		if f.version == "" || f.version != ps.version {
			f.usable, f.version = float64(ps.pool.Usable()), ps.version
		}
		f.w.Add(now, float64(inUse))
		f.est, f.ok = f.w.Estimate(max(0, f.usable-float64(inUse)))
	}
}

// setForecast fills in pv's forecast from the last estimate.
func (m *model) setForecast(pv *poolView) {
	f := m.forecasts[pv.Name]
	if f == nil || !f.ok {
		return
	}
	pv.NetRate, pv.ForecastWindow = f.est.Rate, f.est.Span.Seconds()
	if !math.IsInf(f.est.Seconds, 1) {
		s := f.est.Seconds
		pv.ExhaustionSeconds = &s
	}
	pv.RunsOut = f.est.Within(runsOutWithin)
}
