// Package forecast estimates when a pool runs out of addresses: from the
// addresses in use seen over a recent window it derives the net rate
// (allocations less releases, per second) and divides the free addresses
// by it. It is pure: callers pass the times of their observations.
package forecast

import (
	"math"
	"time"
)

// DefaultWindow is how far back the net rate looks unless told otherwise.
const DefaultWindow = time.Hour

// maxSamples bounds a Window's memory: samples closer together than
// Span/maxSamples are merged (the newest replaces the previous one).
const maxSamples = 64

// Seconds is how long until free addresses are gone at the net rate
// (addresses per second): 0 when none is free, +Inf when the rate is not
// positive (the pool is not filling).
func Seconds(free, rate float64) float64 {
	switch {
	case free <= 0:
		return 0
	case rate <= 0 || math.IsNaN(rate):
		return math.Inf(1)
	}
	return free / rate
}

// Sample is the number of addresses in use at one time.
type Sample struct {
	At    time.Time
	InUse float64
}

// Window keeps the samples of one pool over the last Span (and the one
// just before it, so that the rate spans the whole window once it can).
// The zero value uses DefaultWindow.
type Window struct {
	Span    time.Duration
	samples []Sample
}

func (w *Window) span() time.Duration {
	if w.Span <= 0 {
		return DefaultWindow
	}
	return w.Span
}

// Add records inUse at time at. A sample older than the newest one (the
// clock went back) starts the window over.
func (w *Window) Add(at time.Time, inUse float64) {
	n := len(w.samples)
	if n > 0 && at.Before(w.samples[n-1].At) {
		w.samples = w.samples[:0]
		n = 0
	}
	s := Sample{At: at, InUse: inUse}
	if n >= 2 && at.Sub(w.samples[n-2].At) < w.span()/maxSamples {
		w.samples[n-1] = s
	} else {
		w.samples = append(w.samples, s)
	}
	// Drop the oldest while the next one is still at or before the
	// window's start.
	start := at.Add(-w.span())
	drop := 0
	for drop+1 < len(w.samples) && !w.samples[drop+1].At.After(start) {
		drop++
	}
	if drop > 0 {
		w.samples = append(w.samples[:0], w.samples[drop:]...)
	}
}

// Rate is the net rate over the samples held (addresses per second, from
// the oldest to the newest) and the time it spans; ok is false until two
// samples at different times are held.
func (w *Window) Rate() (rate float64, span time.Duration, ok bool) {
	n := len(w.samples)
	if n < 2 {
		return 0, 0, false
	}
	first, last := w.samples[0], w.samples[n-1]
	span = last.At.Sub(first.At)
	if span <= 0 {
		return 0, 0, false
	}
	return (last.InUse - first.InUse) / span.Seconds(), span, true
}

// Estimate is a forecast and what it rests on.
type Estimate struct {
	// Seconds until the pool runs out (Seconds' rules: 0 when full, +Inf
	// when the net rate is not positive).
	Seconds float64
	// Rate is the net rate in addresses per second; Span the time the
	// samples it was taken from cover.
	Rate float64
	Span time.Duration
}

// Estimate forecasts exhaustion for free addresses left; ok is false when
// the window holds too little to tell a rate, unless the pool is full
// (then the answer is 0 whatever the rate).
func (w *Window) Estimate(free float64) (Estimate, bool) {
	rate, span, ok := w.Rate()
	if !ok && free > 0 {
		return Estimate{}, false
	}
	return Estimate{Seconds: Seconds(free, rate), Rate: rate, Span: span}, true
}

// Within reports whether an estimate says the pool runs out within d.
func (e Estimate) Within(d time.Duration) bool {
	return !math.IsInf(e.Seconds, 1) && e.Seconds <= d.Seconds()
}
