package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/storeview"
)

// Watcher is the storeview.Source of the Kubernetes datastore: it LISTs
// the partition's IPAMPools, IPAMBlocks and IPAMNodes at one
// resourceVersion and WATCHes each from there, with bookmarks. It keeps
// every IPAMBlock (a claim, and once used its block's state) and every
// IPAMNode (a node object's head), and reports a node object whole,
// assembled from them as GetNode assembles it, whenever one of its parts
// changes: following the datastore reads nothing per change.
// IPAMReservations are not followed: a pool in the view carries none
// (ipam.Pool.Reserved), as on etcd; the view's readers do not use them.
//
// Consistency. The first LIST (pools) is read up to date, and the
// blocks and node heads at exactly its resourceVersion, so the three
// lists are one snapshot of etcd. Each WATCH starts from that
// resourceVersion and reports its resource's changes in order; the three
// streams are not ordered against each other, so the view may show a
// block's new state before the head written just after it (or the other
// way round), as two reads of GetNode may: every node object's write on
// this backend is one compare-and-swap per object, whose intermediate
// states are the contract's crash points (docs/STORAGE.md).
//
// Each WATCH is a watch-list from its resourceVersion (sendInitialEvents,
// resourceVersionMatch=NotOlderThan): the API server first sends every
// object as it is then (at that resourceVersion or later), which the
// watcher compares with what it holds — an object at the version held is
// no change, one held and not sent was deleted — then the changes in
// order. The API server gzips a watch-list's stream for a client that
// accepts gzip (Kubernetes 1.37, WatchListCompression) and not a WATCH
// from a resourceVersion, whose every event is a whole object: a pod's
// ADD or DEL changes two blocks of up to 64 records, about 10 KB each,
// which gzip about ninefold. An API server that refuses watch-lists (400
// or 422) is sent regular WATCHes.
//
// The view's Revision is the three resourceVersions ("p=<rv>,b=<rv>,n=<rv>"),
// each moved by its stream's events and bookmarks; a broken watch
// resumes each stream from its own. The API server answers a regular
// WATCH 410 Gone for a resourceVersion older than its watch cache (after
// a restart, or after more changes than the cache holds): Watch then
// fails with storeview.ErrExpired and the view lists again. A Watcher is
// used by one View (one goroutine) at a time.
type Watcher struct {
	s *Store
	// hc is the store's HTTP client without its per-request timeout
	// (Config.Timeout), which would cut every WATCH.
	hc *http.Client
	// plainWatch: the API server refused a watch-list; regular WATCHes
	// from a resourceVersion only.
	plainWatch atomic.Bool

	pools  map[string]string          // IPAMPool name -> pool name
	blocks map[string]storedBlock     // IPAMBlock name -> claim and state
	heads  map[string]headEntry       // IPAMNode name -> head
	parts  map[string]*nodeParts      // node -> the objects holding its parts
	bad    map[string]storeview.Event // object key -> its unreadable event
}

// headEntry is an IPAMNode as the watcher holds it.
type headEntry struct {
	node    string
	loans   []store.LoanSpec
	version store.Version
	whole   bool // in the v1alpha1 form
}

// nodeParts names the objects holding a node object's parts: its
// IPAMNode (head, "" when none) and the IPAMBlocks holding its blocks'
// state.
type nodeParts struct {
	head   string
	blocks map[string]bool
}

var _ storeview.Source = (*Watcher)(nil)
var _ storeview.Resumer = (*Watcher)(nil)

// Watcher returns the storeview.Source of the store's partition.
func (s *Store) Watcher() *Watcher {
	hc := http.DefaultClient
	if s.rc.Client != nil {
		c := *s.rc.Client
		c.Timeout = 0
		hc = &c
	}
	return &Watcher{s: s, hc: hc}
}

// Resumes implements storeview.Resumer: a WATCH the API server accepted
// from a resourceVersion sends every change after it.
func (w *Watcher) Resumes() {}

// revision is the view's Revision of the three resourceVersions.
type revision struct{ pools, blocks, nodes string }

func (r revision) String() string { return "p=" + r.pools + ",b=" + r.blocks + ",n=" + r.nodes }

func parseRevision(s storeview.Revision) (revision, bool) {
	var r revision
	for _, f := range strings.Split(string(s), ",") {
		k, v, ok := strings.Cut(f, "=")
		if !ok || v == "" {
			return revision{}, false
		}
		switch k {
		case "p":
			r.pools = v
		case "b":
			r.blocks = v
		case "n":
			r.nodes = v
		default:
			return revision{}, false
		}
	}
	return r, r.pools != "" && r.blocks != "" && r.nodes != ""
}

// List implements storeview.Source: the IPAMPools up to date, then the
// IPAMBlocks and IPAMNodes at the pools' resourceVersion.
func (w *Watcher) List(ctx context.Context) (storeview.State, error) {
	pl, err := w.s.listRV(ctx, kindPool, "")
	if err != nil {
		return storeview.State{}, err
	}
	bl, err := w.s.listRV(ctx, kindBlock, pl.rv)
	if err != nil {
		return storeview.State{}, err
	}
	nl, err := w.s.listRV(ctx, kindNode, pl.rv)
	if err != nil {
		return storeview.State{}, err
	}
	w.pools, w.blocks, w.heads = map[string]string{}, map[string]storedBlock{}, map[string]headEntry{}
	w.parts, w.bad = map[string]*nodeParts{}, map[string]storeview.Event{}
	st := listState{State: storeview.State{Rev: storeview.Revision(revision{pl.rv, pl.rv, pl.rv}.String())}}
	for i := range pl.items {
		st.add(w.poolEvent(&pl.items[i], false))
	}
	for i := range bl.items {
		evs, _ := w.blockEvent(&bl.items[i], false)
		st.add(evs)
	}
	for i := range nl.items {
		evs, _ := w.headEvent(&nl.items[i], false)
		st.add(evs)
	}
	names := make([]string, 0, len(w.parts))
	for name := range w.parts {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		ev := w.nodeEvent(ctx, name)
		switch {
		case ev.Err != nil:
			st.Bad = append(st.Bad, ev)
		case !ev.Deleted:
			st.Nodes = append(st.Nodes, ev.Node)
		}
	}
	slices.SortFunc(st.Pools, func(a, b store.Pool) int { return strings.Compare(a.Spec.Name, b.Spec.Name) })
	slices.SortFunc(st.Claims, func(a, b store.Claim) int { return a.BlockRef.Compare(b.BlockRef) })
	return st.State, nil
}

// listState is a List's State being filled.
type listState struct{ storeview.State }

// add adds the pools, claims and unreadable objects of a first list's
// events (which delete nothing).
func (st *listState) add(evs []storeview.Event) {
	for _, ev := range evs {
		switch {
		case ev.Err != nil:
			st.Bad = append(st.Bad, ev)
		case ev.Deleted:
		case ev.Kind == storeview.KindPool:
			st.Pools = append(st.Pools, ev.Pool)
		case ev.Kind == storeview.KindClaim:
			st.Claims = append(st.Claims, ev.Claim)
		}
	}
}

// Watch implements storeview.Source: one WATCH per resource, each from
// its resourceVersion in from. Once the API server has accepted all three
// it reports a Batch at from with Current set (every change up to from
// is in the view; those after it follow); then each event is a Batch
// (a block's change carries its claim and its node object, a head's its
// node object) and each bookmark a Batch without events. It returns when
// ctx ends or a stream fails: storeview.ErrExpired on 410 Gone.
func (w *Watcher) Watch(ctx context.Context, from storeview.Revision, fn func(storeview.Batch)) error {
	rev, ok := parseRevision(from)
	if !ok || w.blocks == nil {
		return fmt.Errorf("%w: kube: watch from revision %q", storeview.ErrExpired, from)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	items := make(chan streamItem, 64)
	for _, s := range []struct {
		k  kind
		rv string
	}{{kindPool, rev.pools}, {kindBlock, rev.blocks}, {kindNode, rev.nodes}} {
		go w.stream(ctx, s.k, s.rv, items)
	}
	started := 0
	// seen: of a watch-list's initial objects so far, the names, by kind.
	seen := map[kind]map[string]bool{}
	for {
		var it streamItem
		select {
		case <-ctx.Done():
			return ctx.Err()
		case it = <-items:
		}
		switch {
		case it.err != nil:
			return it.err
		case it.started:
			seen[it.k] = map[string]bool{}
			if it.first {
				if started++; started == 3 {
					fn(storeview.Batch{Rev: storeview.Revision(rev.String()), Current: true})
				}
			}
			continue
		case it.initial:
			// An object as it is at the stream's resourceVersion or
			// later: a change only when its version is not the one held.
			// The stream's resourceVersion moves at the initial
			// objects' end.
			seen[it.k][it.obj.Metadata.Name] = true
			if !w.holds(it.k, it.obj) {
				fn(storeview.Batch{Rev: storeview.Revision(rev.String()), Events: w.apply(ctx, it)})
			}
			continue
		}
		switch it.k {
		case kindPool:
			rev.pools = it.rv
		case kindBlock:
			rev.blocks = it.rv
		default:
			rev.nodes = it.rv
		}
		b := storeview.Batch{Rev: storeview.Revision(rev.String())}
		switch {
		case it.initialEnd:
			// Objects held but not sent again were deleted meanwhile.
			b.Events = w.vanished(ctx, it.k, seen[it.k])
		case it.typ != "BOOKMARK":
			b.Events = w.apply(ctx, it)
		}
		fn(b)
	}
}

// holds reports whether the watcher holds object o of k readable at o's
// resourceVersion (a pool's version is not kept: never).
func (w *Watcher) holds(k kind, o *object) bool {
	v := store.Version(o.Metadata.ResourceVersion)
	switch k {
	case kindBlock:
		b, ok := w.blocks[o.Metadata.Name]
		return ok && b.version == v
	case kindNode:
		h, ok := w.heads[o.Metadata.Name]
		return ok && h.version == v
	}
	return false
}

// vanished deletes the objects of k the watcher holds, readable or not,
// that are not in seen (a watch-list's initial objects), and returns the
// view's events it makes.
func (w *Watcher) vanished(ctx context.Context, k kind, seen map[string]bool) []storeview.Event {
	var names []string
	prefix := "head/"
	switch k {
	case kindPool:
		names, prefix = slices.Collect(maps.Keys(w.pools)), "pool/"
	case kindBlock:
		names, prefix = slices.Collect(maps.Keys(w.blocks)), "block/"
	default:
		names = slices.Collect(maps.Keys(w.heads))
	}
	for key := range w.bad {
		if name, ok := strings.CutPrefix(key, prefix); ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var evs []storeview.Event
	for _, name := range slices.Compact(names) {
		if !seen[name] {
			evs = append(evs, w.apply(ctx, streamItem{k: k, typ: "DELETED", obj: &object{Metadata: meta{Name: name}}})...)
		}
	}
	return evs
}

// apply applies one WATCH event to the watcher's objects and returns the
// view's events it makes.
func (w *Watcher) apply(ctx context.Context, it streamItem) []storeview.Event {
	deleted := it.typ == "DELETED"
	var evs []storeview.Event
	var nodes []string
	switch it.k {
	case kindPool:
		evs = w.poolEvent(it.obj, deleted)
	case kindBlock:
		evs, nodes = w.blockEvent(it.obj, deleted)
	default:
		evs, nodes = w.headEvent(it.obj, deleted)
	}
	for _, n := range nodes {
		evs = append(evs, w.nodeEvent(ctx, n))
	}
	return evs
}

// unreadable records that object key cannot be read: ev, its event.
func (w *Watcher) unreadable(key string, ev storeview.Event) []storeview.Event {
	w.bad[key] = ev
	return []storeview.Event{ev}
}

// readable forgets that object key could not be read and returns the
// events that take its unreadable state out of the view (none when it
// was readable), before evs.
func (w *Watcher) readable(key string, evs ...storeview.Event) []storeview.Event {
	old, ok := w.bad[key]
	if !ok {
		return evs
	}
	delete(w.bad, key)
	for _, ev := range evs {
		if ev.What() == old.What() {
			return evs // the new state replaces it
		}
	}
	clear := storeview.Event{Kind: old.Kind, Deleted: true, Pool: old.Pool, Claim: old.Claim, Node: old.Node}
	return append([]storeview.Event{clear}, evs...)
}

// poolEvent decodes an IPAMPool (deleted: its last state) into its
// events.
func (w *Watcher) poolEvent(o *object, deleted bool) []storeview.Event {
	key := "pool/" + o.Metadata.Name
	name, known := w.pools[o.Metadata.Name]
	delete(w.pools, o.Metadata.Name)
	if deleted {
		if !known {
			return w.readable(key)
		}
		return w.readable(key, storeview.Event{Kind: storeview.KindPool, Deleted: true, Pool: store.Pool{Spec: ipam.Pool{Name: name}}})
	}
	var named struct {
		Name string `json:"name"`
	}
	var p store.Pool
	err := json.Unmarshal(o.Spec, &named)
	if err != nil {
		err = fmt.Errorf("%w: %s: %v", store.ErrCorrupt, what(kindPool, o.Metadata.Name), err)
	} else {
		p, err = w.s.decodePool(o, named.Name)
	}
	if err != nil {
		pname := o.Metadata.Name
		if known {
			pname = name // the pool it held leaves the view
		}
		return w.unreadable(key, storeview.Event{Kind: storeview.KindPool, Err: err,
			Pool: store.Pool{Spec: ipam.Pool{Name: pname}, Version: store.Version(o.Metadata.ResourceVersion)}})
	}
	w.pools[o.Metadata.Name] = p.Spec.Name
	return w.readable(key, storeview.Event{Kind: storeview.KindPool, Pool: p})
}

// blockEvent decodes an IPAMBlock (deleted: its last state) into its
// claim's events, and returns the nodes whose objects it changes: the
// node holding the block's state before and after.
func (w *Watcher) blockEvent(o *object, deleted bool) ([]storeview.Event, []string) {
	key := "block/" + o.Metadata.Name
	old, had := w.blocks[o.Metadata.Name]
	delete(w.blocks, o.Metadata.Name)
	var nodes []string
	if had && old.state != nil {
		nodes = append(nodes, old.claim.Node)
		delete(w.partsOf(old.claim.Node).blocks, o.Metadata.Name)
	}
	if deleted {
		if !had {
			return w.readable(key), nodes
		}
		return w.readable(key, storeview.Event{Kind: storeview.KindClaim, Deleted: true, Claim: store.Claim{BlockRef: old.claim.BlockRef}}), nodes
	}
	b, err := w.s.decodeBlock(o, nil)
	if err != nil {
		ref := store.BlockRef{Pool: o.Metadata.Name}
		if had {
			ref = old.claim.BlockRef // the claim it held leaves the view
		}
		return w.unreadable(key, storeview.Event{Kind: storeview.KindClaim, Err: err,
			Claim: store.Claim{BlockRef: ref, Version: store.Version(o.Metadata.ResourceVersion)}}), nodes
	}
	w.blocks[o.Metadata.Name] = b
	if b.state != nil {
		w.partsOf(b.claim.Node).blocks[o.Metadata.Name] = true
		if !slices.Contains(nodes, b.claim.Node) {
			nodes = append(nodes, b.claim.Node)
		}
	}
	var evs []storeview.Event
	if had && old.claim.BlockRef != b.claim.BlockRef {
		evs = append(evs, storeview.Event{Kind: storeview.KindClaim, Deleted: true, Claim: store.Claim{BlockRef: old.claim.BlockRef}})
	}
	return w.readable(key, append(evs, storeview.Event{Kind: storeview.KindClaim, Claim: b.claim})...), nodes
}

// headEvent decodes an IPAMNode (deleted: its last state) into the
// events of its unreadable state (none when readable), and returns the
// nodes whose objects it changes.
func (w *Watcher) headEvent(o *object, deleted bool) ([]storeview.Event, []string) {
	key := "head/" + o.Metadata.Name
	old, had := w.heads[o.Metadata.Name]
	delete(w.heads, o.Metadata.Name)
	var nodes []string
	if had {
		nodes = append(nodes, old.node)
		if p := w.partsOf(old.node); p.head == o.Metadata.Name {
			p.head = ""
		}
	}
	if deleted {
		return w.readable(key), nodes
	}
	h, err := w.s.decodeHead(o, "")
	if err != nil {
		name := o.Metadata.Name
		if had {
			name = old.node // its node object leaves the view
			nodes = nil
		}
		return w.unreadable(key, storeview.Event{Kind: storeview.KindNode, Err: err,
			Node: store.Node{Name: name, Version: store.Version(o.Metadata.ResourceVersion)}}), nodes
	}
	w.heads[o.Metadata.Name] = headEntry{node: h.Node, loans: h.Loans, version: store.Version(o.Metadata.ResourceVersion), whole: h.whole()}
	w.partsOf(h.Node).head = o.Metadata.Name
	if !slices.Contains(nodes, h.Node) {
		nodes = append(nodes, h.Node)
	}
	// The node object's own event follows (nodes): it replaces an
	// unreadable head of the same name, which is then not cleared.
	evs := w.readable(key, storeview.Event{Kind: storeview.KindNode, Node: store.Node{Name: h.Node}})
	return evs[:len(evs)-1], nodes
}

// nodeEvent assembles node object name from its head and blocks as the
// watcher holds them, as GetNode does: deleted when it has neither. An
// IPAMNode still in the v1alpha1 form is read (and converted) by GetNode.
func (w *Watcher) nodeEvent(ctx context.Context, name string) storeview.Event {
	p := w.parts[name]
	if p == nil || p.head == "" && len(p.blocks) == 0 {
		delete(w.parts, name)
		return storeview.Event{Kind: storeview.KindNode, Deleted: true, Node: store.Node{Name: name}}
	}
	var loans []store.LoanSpec
	var version store.Version
	if p.head != "" {
		h := w.heads[p.head]
		if h.whole {
			n, err := w.s.GetNode(ctx, name)
			if errors.Is(err, store.ErrNotFound) {
				return storeview.Event{Kind: storeview.KindNode, Deleted: true, Node: store.Node{Name: name}}
			}
			if err != nil {
				return storeview.Event{Kind: storeview.KindNode, Node: store.Node{Name: name, Version: h.version}, Err: err}
			}
			return storeview.Event{Kind: storeview.KindNode, Node: n}
		}
		loans, version = h.loans, h.version
	}
	blocks := make([]storedBlock, 0, len(p.blocks))
	for b := range p.blocks {
		blocks = append(blocks, w.blocks[b])
	}
	n, err := assemble(name, loans, version, blocks)
	if err != nil {
		return storeview.Event{Kind: storeview.KindNode, Node: store.Node{Name: name, Version: version}, Err: err}
	}
	return storeview.Event{Kind: storeview.KindNode, Node: n}
}

// partsOf returns node's parts, made when it has none.
func (w *Watcher) partsOf(node string) *nodeParts {
	p := w.parts[node]
	if p == nil {
		p = &nodeParts{blocks: map[string]bool{}}
		w.parts[node] = p
	}
	return p
}
