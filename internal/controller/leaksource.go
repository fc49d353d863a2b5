package controller

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/leaks"
	"github.com/ipkeeper/ipkeeper/internal/webui"
)

// Scans for the address map's leak candidates run when the map's handles
// or the pods and nodes changed, at most once a mapLeakDebounce and at
// most a fifth of the time (a scan of 550 000 handles takes about a
// second), and every mapLeakPeriod all the same.
const (
	mapLeakDebounce = 2 * time.Second
	mapLeakPeriod   = 5 * time.Minute
)

// MapHandles is where MapLeaks reads the handles: the address map's mirror
// of the datastore (webui.UI.Handles), so that looking for candidates
// costs the datastore nothing.
type MapHandles interface {
	Handles() (hs []ipam.Handle, gen uint64, loaded bool)
	Generation() uint64
}

// MapLeaks is the address map's webui.LeakSource: the allocations the
// leak rules find leaked now, given the informers' caches, whether or not
// this replica leads (it releases nothing). Run keeps it current;
// LeakCandidates answers from memory.
type MapLeaks struct {
	c       *Controller
	trigger chan struct{}
	period  time.Duration // between scans when nothing changed
	regs    []cache.ResourceEventHandlerRegistration

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
	// Pods and nodes deleted, pods finished or their addresses changed
	// (what makes the reconciler look again), and pods added (which may
	// own a handle that looked leaked).
	pods, err := c.view.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { poke() },
		UpdateFunc: func(old, cur any) {
			if podChanged(old, cur) {
				poke()
			}
		},
		DeleteFunc: func(any) { poke() },
	})
	if err != nil {
		return nil, err
	}
	nodes, err := c.view.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(any) { poke() }})
	if err != nil {
		return nil, err
	}
	l.regs = []cache.ResourceEventHandlerRegistration{pods, nodes}
	return l, nil
}

// handlersSynced reports whether the handlers have been told of every pod
// and node the informers held when they were added.
func (l *MapLeaks) handlersSynced() bool {
	for _, r := range l.regs {
		if !r.HasSynced() {
			return false
		}
	}
	return true
}

// LeakCandidates implements webui.LeakSource: one candidate per address of
// every leaked allocation the last scan found, in address order.
func (l *MapLeaks) LeakCandidates() []webui.LeakCandidate {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.list)
}

// Run scans the handles of src until ctx ends: once the informers have
// listed pods and nodes (before, every allocation would look leaked) and
// src has read the datastore, then when either changed (src's generation
// is looked at every mapLeakDebounce) and every period; never more than a
// fifth of the time.
func (l *MapLeaks) Run(ctx context.Context, src MapHandles) {
	tick := time.NewTicker(mapLeakDebounce)
	defer tick.Stop()
	var scanned uint64 // src's generation at the last scan
	due := time.Time{} // the next scan (zero: as soon as possible)
	changed := true
	for {
		if changed && l.c.view.synced() && !time.Now().Before(due) {
			start := time.Now()
			gen, ok := l.Scan(src)
			took := time.Since(start)
			if ok {
				scanned, changed = gen, false
				due = time.Now().Add(max(4*took, mapLeakDebounce))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-l.trigger:
			changed = true
		case <-tick.C:
			if src.Generation() != scanned || time.Since(due) > l.period {
				changed = true
			}
		}
	}
}

// Scan runs the leak rules over src's handles and the informers' view
// (read after the handles) and keeps what they find as the candidates. It
// returns the generation of the handles, and false when src has not read
// the datastore yet. The informers must have synced.
func (l *MapLeaks) Scan(src MapHandles) (uint64, bool) {
	hs, gen, loaded := src.Handles()
	if !loaded {
		return 0, false
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
	slices.SortFunc(list, func(a, b webui.LeakCandidate) int { return a.Addr.Compare(b.Addr) })
	l.first, l.list = first, list
	return gen, true
}
