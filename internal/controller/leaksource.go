package controller

import (
	"context"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/leaks"
	"github.com/ipkeeper/ipkeeper/internal/webui"
)

// Scans for the address map's leak candidates run after pod and node
// events (mapLeakDebounce later, so a burst makes one scan) and every
// mapLeakPeriod, and never take more than half of the time.
const (
	mapLeakDebounce = time.Second
	mapLeakPeriod   = 30 * time.Second
)

// MapLeaks is the address map's webui.LeakSource: the allocations the
// leak rules find leaked now, given the informers' caches, whether or not
// this replica leads (it releases nothing). Run keeps it current;
// LeakCandidates answers from memory.
type MapLeaks struct {
	c       *Controller
	trigger chan struct{}
	period  time.Duration // between scans without events

	mu    sync.Mutex
	first map[string]time.Time // leaks.Key -> when a scan first found it
	list  []webui.LeakCandidate
}

// NewMapLeaks returns the leak source of c's address map; it follows the
// pod and node events of c's informers.
func (c *Controller) NewMapLeaks() (*MapLeaks, error) {
	l := &MapLeaks{c: c, trigger: make(chan struct{}, 1), period: mapLeakPeriod, first: map[string]time.Time{}}
	poke := func() {
		select {
		case l.trigger <- struct{}{}:
		default:
		}
	}
	// The same events that make the reconciler look again: a pod or node
	// deleted, a pod finished or its addresses changed.
	if _, err := c.view.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*corev1.Pod)
			n, ok2 := cur.(*corev1.Pod)
			if ok1 && ok2 && (o.Status.Phase != n.Status.Phase || !samePodIPs(o, n)) {
				poke()
			}
		},
		DeleteFunc: func(any) { poke() },
	}); err != nil {
		return nil, err
	}
	if _, err := c.view.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(any) { poke() }}); err != nil {
		return nil, err
	}
	return l, nil
}

// LeakCandidates implements webui.LeakSource: one candidate per address of
// every leaked allocation the last scan found.
func (l *MapLeaks) LeakCandidates() []webui.LeakCandidate {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.list)
}

// Run scans until ctx ends: once the informers have listed pods and
// nodes (before, every allocation would look leaked), then after events
// and every mapLeakPeriod.
func (l *MapLeaks) Run(ctx context.Context) {
	tick := time.NewTicker(100 * time.Millisecond)
	for !l.c.view.synced() {
		select {
		case <-ctx.Done():
			tick.Stop()
			return
		case <-tick.C:
		}
	}
	tick.Stop()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		start := time.Now()
		err := l.Scan(ctx)
		took := time.Since(start)
		if err != nil && ctx.Err() == nil {
			l.c.log.Warn("address map: looking for leak candidates failed", "err", err)
		}
		rest := max(took, mapLeakDebounce) // at most half of the time in scans
		select {
		case <-ctx.Done():
			return
		case <-l.trigger:
			timer.Reset(rest)
		case <-time.After(max(l.period-took, rest)):
			timer.Reset(0)
		}
	}
}

// Scan reads the handles, then the informers' view, and keeps what the
// leak rules find as the candidates. The informers must have synced.
func (l *MapLeaks) Scan(ctx context.Context) error {
	st, done, err := l.c.openStore(ctx)
	if err != nil {
		return err
	}
	hs, err := allocator.New(st, nil).Handles(ctx)
	done()
	if err != nil {
		return err
	}
	found := leaks.Find(hs, l.c.view.snapshot())
	now := l.c.cfg.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	first := make(map[string]time.Time, len(found))
	var list []webui.LeakCandidate
	for _, f := range found {
		k := leaks.Key(f.Handle)
		since, ok := l.first[k]
		if !ok {
			since = now
		}
		first[k] = since
		for _, ip := range f.Handle.IPs {
			list = append(list, webui.LeakCandidate{Addr: ip.Addr, Handle: f.Handle.ID, Pod: podName(f.Handle),
				Reason: string(f.Reason) + ": " + f.Detail, Since: since})
		}
	}
	l.first, l.list = first, list
	return nil
}
