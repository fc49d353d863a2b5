package storeview

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// RetryWait is the pause before a view lists again after a failed list or
// a watch that broke (a watch whose revision expired lists at once).
const RetryWait = time.Second

// View is the datastore's pools, claims and node objects as its Source
// last reported them. Readers take a Snapshot; Changed tells when it moved.
type View struct {
	src    Source
	polled bool
	log    *slog.Logger
	// retry is RetryWait; tests shorten it.
	retry time.Duration

	mu      sync.RWMutex
	rev     Revision
	synced  bool
	lastErr error
	gen     uint64
	changed chan struct{}
	lists   int
	// progress counts the batches that reported the watch current.
	progress uint64
	pools    map[string]store.Pool
	claims   map[store.BlockRef]store.Claim
	nodes    map[string]store.Node
	bad      map[string]Event
}

// New returns a view that follows src by its watch once Run runs.
func New(src Source, log *slog.Logger) *View { return newView(src, false, log) }

// NewPolled returns a view of a source that is not watched: it holds what
// the last Refresh listed, and is synced while the last Refresh succeeded.
func NewPolled(src Source, log *slog.Logger) *View { return newView(src, true, log) }

func newView(src Source, polled bool, log *slog.Logger) *View {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &View{src: src, polled: polled, log: log, retry: RetryWait, changed: make(chan struct{}),
		pools: map[string]store.Pool{}, claims: map[store.BlockRef]store.Claim{}, nodes: map[string]store.Node{},
		bad: map[string]Event{}}
}

// Polled reports whether the view is refreshed by listing (NewPolled)
// rather than by a watch.
func (v *View) Polled() bool { return v.polled }

// Run follows the source until ctx ends: it lists, watches from the
// revision listed and, when the watch breaks, resumes it from the view's
// revision after RetryWait; it lists again at once when that revision
// expired, and after RetryWait when the source is neither a Progresser nor
// a Resumer (a resumed watch could not tell when it has caught up). From a failure until the
// next list, or until a resumed watch reports it has caught up, the view
// is not synced. Run does nothing on a polled view.
func (v *View) Run(ctx context.Context) {
	if v.polled {
		return
	}
	_, resumable := v.src.(Progresser)
	if _, ok := v.src.(Resumer); ok {
		resumable = true
	}
	listed := false
	for ctx.Err() == nil {
		var err error
		if !listed {
			var st State
			if st, err = v.src.List(ctx); err == nil {
				v.replace(st)
				listed = true
			} else {
				err = fmt.Errorf("list the datastore: %w", err)
			}
		}
		if err == nil {
			err = v.watch(ctx)
		}
		if ctx.Err() != nil {
			return
		}
		v.fail(err)
		if errors.Is(err, ErrExpired) {
			v.log.Info("store view: the watch's revision expired; listing again", "err", err)
			listed = false
			continue
		}
		v.log.Warn("store view: the datastore's watch failed", "err", err, "resume", listed && resumable)
		listed = listed && resumable
		select {
		case <-ctx.Done():
			return
		case <-time.After(v.retry):
		}
	}
}

// watch runs the source's watch from the view's revision. While the view
// is not synced (a resumed watch) it asks a Progresser for its progress
// every progressEvery, until the watch reports it has caught up.
func (v *View) watch(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if p, ok := v.src.(Progresser); ok && !v.Synced() {
		go func() {
			t := time.NewTicker(progressEvery)
			defer t.Stop()
			for !v.Synced() {
				p.RequestProgress()
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
	return v.src.Watch(ctx, v.Revision(), v.apply)
}

// progressEvery is how often a view asks its source for the progress of
// its watch while it waits for it (a resumed watch, Sync).
const progressEvery = 100 * time.Millisecond

// Refresh brings the view up to date. A polled view lists its source
// again. A followed view fails with ErrNotSynced when it is not synced;
// of a Progresser it then waits until the watch reports every change made
// before the call (Sync), else it returns at once.
func (v *View) Refresh(ctx context.Context) error {
	if !v.polled {
		return v.Sync(ctx)
	}
	st, err := v.src.List(ctx)
	if err != nil {
		v.fail(err)
		return err
	}
	v.replace(st)
	return nil
}

// Sync waits until a followed view holds every change made to the
// datastore before the call (the source's watch reported its progress
// after the call), or ctx ends. It fails with ErrNotSynced when the view is
// not synced, now or when the progress arrives.
func (v *View) Sync(ctx context.Context) error {
	p, ok := v.src.(Progresser)
	v.mu.RLock()
	synced, seq := v.synced, v.progress
	v.mu.RUnlock()
	if !synced {
		return ErrNotSynced
	}
	if !ok || v.polled {
		return nil
	}
	t := time.NewTicker(progressEvery)
	defer t.Stop()
	for {
		p.RequestProgress()
		_, ch := v.Changed()
		v.mu.RLock()
		synced, done := v.synced, v.progress > seq+1
		v.mu.RUnlock()
		switch {
		case !synced:
			return ErrNotSynced
		case done:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: waiting for the watch's progress: %w", ErrNotSynced, ctx.Err())
		case <-ch:
		case <-t.C:
		}
	}
}

// Synced reports whether the view holds the datastore's state: it has
// listed, and its watch has not failed since.
func (v *View) Synced() bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.synced
}

// Err returns why the view last failed to list or to watch (nil while
// synced).
func (v *View) Err() error {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.lastErr
}

// Revision returns the revision the view is at ("" before it listed).
func (v *View) Revision() Revision {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.rev
}

// Lists returns how many lists of the source the view made.
func (v *View) Lists() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.lists
}

// Changed returns the view's generation and a channel closed when it
// moves: at each change of its objects, of its revision, or of whether
// it is synced.
func (v *View) Changed() (uint64, <-chan struct{}) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.gen, v.changed
}

// WaitSynced waits until the view is synced or ctx ends.
func (v *View) WaitSynced(ctx context.Context) bool {
	for {
		_, ch := v.Changed()
		if v.Synced() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-ch:
		}
	}
}

// bumpLocked moves the generation and wakes the waiters.
func (v *View) bumpLocked() {
	v.gen++
	close(v.changed)
	v.changed = make(chan struct{})
}

func (v *View) fail(err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.lastErr = err
	if v.synced {
		v.synced = false
		v.bumpLocked()
	}
}

// replace makes the view st, and synced.
func (v *View) replace(st State) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.pools = make(map[string]store.Pool, len(st.Pools))
	for _, p := range st.Pools {
		v.pools[p.Spec.Name] = p
	}
	v.claims = make(map[store.BlockRef]store.Claim, len(st.Claims))
	for _, c := range st.Claims {
		v.claims[c.BlockRef] = c
	}
	v.nodes = make(map[string]store.Node, len(st.Nodes))
	for _, n := range st.Nodes {
		v.nodes[n.Name] = n
	}
	v.bad = make(map[string]Event, len(st.Bad))
	for _, e := range st.Bad {
		v.bad[e.key()] = e
	}
	v.rev, v.synced, v.lastErr = st.Rev, true, nil
	v.lists++
	v.bumpLocked()
}

// apply applies one batch of a watch.
func (v *View) apply(b Batch) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, e := range b.Events {
		k := e.key()
		if e.Err != nil {
			v.bad[k] = e
		} else {
			delete(v.bad, k)
		}
		switch e.Kind {
		case KindPool:
			if e.Deleted || e.Err != nil {
				delete(v.pools, e.Pool.Spec.Name)
			} else {
				v.pools[e.Pool.Spec.Name] = e.Pool
			}
		case KindClaim:
			if e.Deleted || e.Err != nil {
				delete(v.claims, e.Claim.BlockRef)
			} else {
				v.claims[e.Claim.BlockRef] = e.Claim
			}
		case KindNode:
			if e.Deleted || e.Err != nil {
				delete(v.nodes, e.Node.Name)
			} else {
				v.nodes[e.Node.Name] = e.Node
			}
		}
	}
	moved := b.Rev != v.rev || len(b.Events) > 0
	v.rev = b.Rev
	if b.Current {
		v.progress++
		if !v.synced {
			// A resumed watch caught up.
			v.synced, v.lastErr = true, nil
		}
		moved = true
	}
	if moved {
		v.bumpLocked()
	}
}

// Snapshot is the view's objects at one moment. Its objects are shared
// with the view and with other snapshots: do not change them.
type Snapshot struct {
	Rev    Revision
	Gen    uint64
	Synced bool
	// Pools sorted by name, Claims by pool then CIDR, Nodes by name.
	Pools  []store.Pool
	Claims []store.Claim
	Nodes  []store.Node
	// Bad are the objects that cannot be decoded, sorted by what they
	// name.
	Bad []Event
}

// Snapshot returns the view's objects now.
func (v *View) Snapshot() Snapshot {
	v.mu.RLock()
	s := Snapshot{Rev: v.rev, Gen: v.gen, Synced: v.synced,
		Pools:  make([]store.Pool, 0, len(v.pools)),
		Claims: make([]store.Claim, 0, len(v.claims)),
		Nodes:  make([]store.Node, 0, len(v.nodes)),
		Bad:    make([]Event, 0, len(v.bad)),
	}
	for _, p := range v.pools {
		s.Pools = append(s.Pools, p)
	}
	for _, c := range v.claims {
		s.Claims = append(s.Claims, c)
	}
	for _, n := range v.nodes {
		s.Nodes = append(s.Nodes, n)
	}
	for _, e := range v.bad {
		s.Bad = append(s.Bad, e)
	}
	v.mu.RUnlock()
	slices.SortFunc(s.Pools, func(a, b store.Pool) int { return strings.Compare(a.Spec.Name, b.Spec.Name) })
	slices.SortFunc(s.Claims, func(a, b store.Claim) int {
		if c := cmp.Compare(a.Pool, b.Pool); c != 0 {
			return c
		}
		return a.CIDR.Addr().Compare(b.CIDR.Addr())
	})
	slices.SortFunc(s.Nodes, func(a, b store.Node) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(s.Bad, func(a, b Event) int { return strings.Compare(a.key(), b.key()) })
	return s
}

// Node returns node object name as the view holds it.
func (v *View) Node(name string) (store.Node, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	n, ok := v.nodes[name]
	return n, ok
}
