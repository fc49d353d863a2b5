package kvbacked

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
	"github.com/ipkeeper/ipkeeper/internal/storeview"
)

// revLister is a kv.Store that lists a prefix at a given revision (etcd).
type revLister interface {
	ListAt(ctx context.Context, prefix string, rev int64) ([]kv.KeyValue, int64, error)
}

// Follower is the storeview.Source of a store on etcd: it lists pools,
// claims and node objects' parts at one revision and watches every key
// from it. It keeps the parts of every node object, applies the watched
// changes of parts in revision order and reports a changed node object
// whole, decoded from its parts, so following the store reads nothing
// per change. A Follower is used by one View (one goroutine) at a time.
type Follower struct {
	s        *Store
	l        revLister
	w        progressWatcher
	progress chan struct{}
	parts    map[string]map[string]kv.KeyValue // node -> key -> part
}

// progressWatcher is a kv.Store whose watch reports its progress when
// asked (etcd).
type progressWatcher interface {
	WatchProgress(ctx context.Context, prefix string, after int64, progress <-chan struct{}, fn func(rev int64, evs []etcd.Event)) error
}

// Follower returns the storeview.Source of s, or false when its kv.Store
// cannot be listed at a revision and watched (the local file).
func (s *Store) Follower() (*Follower, bool) {
	l, ok1 := s.kv.(revLister)
	w, ok2 := s.kv.(progressWatcher)
	if !ok1 || !ok2 {
		return nil, false
	}
	return &Follower{s: s, l: l, w: w, progress: make(chan struct{}, 1), parts: map[string]map[string]kv.KeyValue{}}, true
}

var (
	_ storeview.Source     = (*Follower)(nil)
	_ storeview.Progresser = (*Follower)(nil)
)

// RequestProgress implements storeview.Progresser: the running watch asks
// etcd for its progress, which etcd answers once the watch has reported
// every change up to the revision it answers with.
func (f *Follower) RequestProgress() {
	select {
	case f.progress <- struct{}{}:
	default:
	}
}

// List implements storeview.Source: three lists (pools, claims, node
// objects' parts) at the revision of the first.
func (f *Follower) List(ctx context.Context) (storeview.State, error) {
	if err := f.s.checkRead(ctx); err != nil {
		return storeview.State{}, err
	}
	pes, rev, err := f.l.ListAt(ctx, poolPrefix, 0)
	if err != nil {
		return storeview.State{}, followErr("list pools", err)
	}
	ces, _, err := f.l.ListAt(ctx, claimPrefix, rev)
	if err != nil {
		return storeview.State{}, followErr("list claims", err)
	}
	nes, _, err := f.l.ListAt(ctx, nodePrefix, rev)
	if err != nil {
		return storeview.State{}, followErr("list node objects", err)
	}
	st := storeview.State{Rev: formatRev(rev)}
	for _, e := range pes {
		ev, _ := typedEvent(etcd.Event{Key: e.Key, Value: e.Value, Version: e.Version})
		if ev.Err != nil {
			st.Bad = append(st.Bad, viewEvent(ev))
			continue
		}
		st.Pools = append(st.Pools, ev.Pool)
	}
	for _, e := range ces {
		ev, ok := typedEvent(etcd.Event{Key: e.Key, Value: e.Value, Version: e.Version})
		switch {
		case !ok:
			continue
		case ev.Err != nil:
			st.Bad = append(st.Bad, viewEvent(ev))
		default:
			st.Claims = append(st.Claims, ev.Claim)
		}
	}
	f.parts = map[string]map[string]kv.KeyValue{}
	for _, e := range nes {
		name, ok := nodeOfPart(e.Key)
		if !ok {
			continue // a whole key the conversion of the 2 layout left
		}
		p := f.parts[name]
		if p == nil {
			p = map[string]kv.KeyValue{}
			f.parts[name] = p
		}
		p[e.Key] = e
	}
	names := make([]string, 0, len(f.parts))
	for name := range f.parts {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		ev := f.nodeEvent(name, rev)
		switch {
		case ev.Err != nil:
			st.Bad = append(st.Bad, ev)
		case !ev.Deleted:
			st.Nodes = append(st.Nodes, ev.Node)
		}
	}
	return st, nil
}

// Watch implements storeview.Source: the changes after from, each batch
// one response of etcd's watch; a batch that changes no pool, claim or
// node object only moves the revision, and etcd's answers to progress
// requests are batches with Current set. A revision etcd compacted away
// fails with storeview.ErrExpired.
func (f *Follower) Watch(ctx context.Context, from storeview.Revision, fn func(storeview.Batch)) error {
	after, err := strconv.ParseInt(string(from), 10, 64)
	if err != nil || after <= 0 {
		return fmt.Errorf("%w: kvbacked: watch from revision %q", storeview.ErrExpired, from)
	}
	// From revision from itself, whose changes the view holds already
	// (applying them again changes nothing): etcd answers a progress
	// request only for a watch that starts at or before its revision,
	// and a store nobody writes would otherwise never report progress.
	err = f.w.WatchProgress(ctx, "", after-1, f.progress, func(rev int64, kevs []etcd.Event) {
		if kevs == nil {
			fn(storeview.Batch{Rev: formatRev(rev), Current: true})
			return
		}
		var evs []storeview.Event
		var touched []string
		for _, ke := range kevs {
			if name, ok := nodeOfPart(ke.Key); ok {
				p := f.parts[name]
				if p == nil {
					p = map[string]kv.KeyValue{}
					f.parts[name] = p
				}
				if !slices.Contains(touched, name) {
					touched = append(touched, name)
				}
				if ke.Delete {
					delete(p, ke.Key)
				} else {
					p[ke.Key] = kv.KeyValue{Key: ke.Key, Value: ke.Value, Version: ke.Version}
				}
				continue
			}
			if ev, ok := typedEvent(ke); ok {
				evs = append(evs, viewEvent(ev))
			}
		}
		for _, name := range touched {
			evs = append(evs, f.nodeEvent(name, rev))
		}
		fn(storeview.Batch{Rev: formatRev(rev), Events: evs})
	})
	return followErr("watch the datastore", err)
}

// nodeEvent is node object name as its parts now are: deleted when it
// has none, else decoded (Err when they do not make a node object).
func (f *Follower) nodeEvent(name string, rev int64) storeview.Event {
	p := f.parts[name]
	if len(p) == 0 {
		delete(f.parts, name)
		return storeview.Event{Kind: storeview.KindNode, Deleted: true, Node: store.Node{Name: name}}
	}
	es := make([]kv.KeyValue, 0, len(p))
	for _, e := range p {
		es = append(es, e)
	}
	slices.SortFunc(es, func(a, b kv.KeyValue) int { return cmp.Compare(a.Key, b.Key) })
	n, err := decodeParts(name, es)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			err = fmt.Errorf("%w: node object %q: parts without a head", store.ErrCorrupt, name)
		}
		v := version(rev)
		if e, ok := p[headKey(name)]; ok {
			v = version(e.Version)
		}
		return storeview.Event{Kind: storeview.KindNode, Node: store.Node{Name: name, Version: v}, Err: err}
	}
	return storeview.Event{Kind: storeview.KindNode, Node: n}
}

// viewEvent is the storeview.Event of a pool's or claim's Event.
func viewEvent(ev Event) storeview.Event {
	return storeview.Event{Kind: storeview.Kind(ev.Kind), Deleted: ev.Deleted, Pool: ev.Pool, Claim: ev.Claim, Node: ev.Node, Err: ev.Err}
}

// followErr maps a list's or watch's error: a compacted revision is
// storeview.ErrExpired.
func followErr(what string, err error) error {
	if errors.Is(err, etcd.ErrWatchCompacted) {
		return fmt.Errorf("%w: %s: %w", storeview.ErrExpired, what, err)
	}
	return mapErr(what, err)
}

func formatRev(rev int64) storeview.Revision { return storeview.Revision(strconv.FormatInt(rev, 10)) }

// RevisionOf returns the kv revision of a Revision a Follower reported.
func RevisionOf(r storeview.Revision) (int64, bool) {
	rev, err := strconv.ParseInt(string(r), 10, 64)
	return rev, err == nil && rev > 0
}
