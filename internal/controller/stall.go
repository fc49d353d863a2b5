package controller

import (
	"context"
	"sync"
	"time"
)

// A pause is a gap of more than stallLimit between heartbeats, which a
// ticker gives every stallTick while a term runs. The limit is far below
// the shortest time a pause can cost the Lease (lease duration minus
// retry period; 13s with the defaults), and above the scheduling delays of
// a busy host (a false alarm only delays releases by a grace period).
const (
	stallTick  = 100 * time.Millisecond
	stallLimit = time.Second
)

// stallGuard notices that the process did not run for a while: it was
// stopped (SIGSTOP), its VM was frozen, or its host starved it. The code
// that releases compares count before each release with the count it
// decided under.
type stallGuard struct {
	mu sync.Mutex
	// last is the latest heartbeat; zero while no term runs.
	last   time.Time
	stalls int
	// now is the clock (time.Now when nil; tests set it).
	now func() time.Time
}

func (g *stallGuard) clock() time.Time {
	if g.now != nil {
		return g.now()
	}
	return time.Now()
}

// start beats the guard until ctx ends or the returned stop is called;
// stop waits for the ticker to end.
func (g *stallGuard) start(ctx context.Context) (stop func()) {
	g.mu.Lock()
	g.last = g.clock()
	g.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(stallTick)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				g.count()
			}
		}
	}()
	return func() {
		cancel()
		<-done
		g.mu.Lock()
		g.last = time.Time{}
		g.mu.Unlock()
	}
}

// count is a heartbeat: it returns how many pauses were seen, this gap
// since the previous heartbeat included. Whichever runs first after a
// pause — the ticker or the code about to release — sees the gap.
func (g *stallGuard) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.last.IsZero() {
		now := g.clock()
		if now.Sub(g.last) > stallLimit {
			g.stalls++
		}
		g.last = now
	}
	return g.stalls
}
