package controller

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// pauseOnRelease is a slog handler that makes the stall guard see a pause
// of the process right after the first release is logged, as if the
// process had been stopped there.
type pauseOnRelease struct {
	slog.Handler
	clock  *clock
	paused bool
}

func (h *pauseOnRelease) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "released leaked address" && !h.paused {
		h.paused = true
		h.clock.Set(h.clock.Now().Add(2 * stallLimit))
	}
	return h.Handler.Handle(ctx, r)
}

// TestPassPaused: a process paused in the middle of its releases (it may
// have lost its Lease meanwhile) starts no further release; every leak
// it had confirmed must be seen leaked for a whole grace period again. A
// pause between passes voids the confirmations from before it the same
// way.
func TestPassPaused(t *testing.T) {
	for _, f := range passFamilies {
		t.Run(f.name, func(t *testing.T) {
			const grace = time.Minute
			r := newRig(t, grace)
			r.alloc(func(a *allocator.Allocator) {
				if _, err := a.EnsurePool(context.Background(), f.pool); err != nil {
					t.Fatal(err)
				}
			})
			// One leak on each of three nodes: a node's leaks are released
			// in one write, and one worker takes the nodes one by one.
			r.c.releaseWorkers = 1
			gone := []string{"gone-0", "gone-1", "gone-2"}
			for i, name := range gone {
				node := r.node(fmt.Sprint("n", i))
				uid := r.pod(name, node, corev1.PodRunning)
				r.attach(f.pool, name, name, uid, node, t0)
				r.deletePod(name)
			}
			left := func() int {
				n := 0
				for _, name := range gone {
					if _, ok := r.handles()[name]; ok {
						n++
					}
				}
				return n
			}
			// The guard runs as in a term, on a clock of the test's that
			// stands still unless the test makes the process pause.
			mono := &clock{t: t0}
			r.c.guard.now = mono.Now
			stop := r.c.guard.start(context.Background())
			defer stop()

			// A pause between the two observations voids the first.
			r.pass(t0)
			mono.Set(mono.Now().Add(2 * stallLimit))
			r.pass(t0.Add(grace))
			if n := left(); n != len(gone) {
				t.Fatalf("%d of %d released by the first pass after a pause", len(gone)-n, len(gone))
			}

			// A pause after the first release of a pass stops the pass.
			var out strings.Builder
			h := &pauseOnRelease{Handler: slog.NewTextHandler(&out, nil), clock: mono}
			r.c.log = slog.New(h)
			r.pass(t0.Add(2 * grace))
			if n := left(); n != len(gone)-1 {
				t.Fatalf("%d of %d released by a pass paused after its first release, want 1\n%s", len(gone)-n, len(gone), out.String())
			}
			if !strings.Contains(out.String(), "this process was paused") {
				t.Errorf("the pause is not logged:\n%s", out.String())
			}
			r.pass(t0.Add(2*grace + time.Second))
			if n := left(); n != len(gone)-1 {
				t.Fatalf("released %d before a grace period after the pause", len(gone)-1-n)
			}
			r.pass(t0.Add(3*grace + time.Second))
			if n := left(); n != 0 {
				t.Fatalf("%d left a grace period after the pause", n)
			}
			if got := r.handles(); len(got) != 0 {
				t.Fatalf("handles left: %v", keysOf(got))
			}
		})
	}
}

func keysOf(m map[string]ipam.Handle) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
