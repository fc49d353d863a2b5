// Package controller is ipkeeper-controller: it reclaims leaked addresses
// by comparing the datastore's handles with the Kubernetes API, seen
// through shared informers for Pods and Nodes.
//
// A reconcile pass decides from a view of the typed store (docs/STORAGE.md):
// every claim, node object and pool, as package storeview holds them, then
// asks package leaks which handles are leaked given the informers'
// caches (read after the store view, so no handle is newer than them). A
// leaked handle is released when a pass finds it leaked at least the grace
// period after the pass that first did (leaks.Tracker), one node object at
// a time, each write guarded by the handle's record as that pass read it
// (allocator.ReleaseObserved): an address released and allocated again in
// between is never touched. Nodes that hold claims but are gone from the
// API are confirmed the same way; their empty blocks then leave their
// objects and their claims are deleted (allocator.FreeNodeBlocks). Claims
// of other nodes whose block their node's object does not hold (an ADD
// killed between its claim and its object's write) are taken into the
// object, empty, once seen so for a grace period (allocator.AdoptClaims).
// Nothing is released before the informers have synced, while a watch of
// the API failed within the grace period, or while the API does not list
// pods or nodes, since the caches may then be stale; nor while the view of
// the store is not synced.
//
// On etcd the store view is kept by a watch (list once, then follow the
// changes; storeview.View): a pass first waits until the view holds every
// write made before it (a progress request on the watch, no read of the
// store), and what it releases, frees or adopts is read again directly
// (the node object, the node's claims) and written by compare-and-swap
// against that read. A change of the view asks for a pass. On the local
// file and the Kubernetes API the view is polled: the store is listed once
// per pass (after pod and node events, and every resync period), never
// per pod.
//
// Passes run after pod and node deletions (and pods finishing or changing
// addresses), when a tracked leak's grace period ends, and every resync
// period. With leader election only the holder of the Lease reconciles;
// every replica keeps its informers warm. The only state kept between
// passes is when each candidate was first seen: a restart or failover
// only delays releases by one grace period.
//
// A replica that did not run for a while (stopped, a frozen VM, a starved
// host) may have lost its Lease without knowing yet: the elector ends its
// term only after the renew deadline, and until then the reconcile loop
// would go on releasing on its old confirmations beside the new leader.
// A pause is noticed (stallGuard) before every release; the pass then
// stops, and every candidate must be seen leaked for a whole grace period
// again — longer than the elector needs to end a lost term (renew
// deadline plus retry period) when the grace period is.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/leaks"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/storeview"
)

// Config configures a Controller.
type Config struct {
	// Client talks to the Kubernetes API.
	Client kubernetes.Interface
	// Open opens the typed datastore. With KeepOpen false (the local
	// store, whose file lock would stall the node's plugin calls) it is
	// opened for each pass and closed after it; otherwise once.
	Open     func(ctx context.Context) (store.Store, error)
	KeepOpen bool
	// LeakGrace is how long an allocation must be seen leaked before it is
	// released (and a node gone before its blocks are freed).
	LeakGrace time.Duration
	// Resync is the period of full passes.
	Resync time.Duration
	// StickyTTL is how long a sticky reservation outlives its pod when its
	// identity does not end first (DefaultStickyTTL when zero).
	StickyTTL time.Duration
	// Debounce is how long a pass waits after an event that triggered it,
	// so that a burst of deletions makes one pass (default 500ms).
	Debounce time.Duration
	// Log receives one record per release; nil discards.
	Log *slog.Logger
	// Metrics, when set, receives the controller's metrics.
	Metrics *Metrics
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Controller reclaims leaked addresses.
type Controller struct {
	cfg     Config
	log     *slog.Logger
	m       *Metrics
	view    *apiView
	trigger chan struct{}

	storeMu sync.Mutex
	store   store.Store // when KeepOpen

	// sview is the view of a store kept open that is followed by its
	// watch (storeview.go); viewStop stops it.
	viewMu   sync.Mutex
	sview    *storeview.View
	viewStop func()
	// viewSyncWait bounds a pass's wait for the store view
	// (viewSyncTimeout; tests shorten it).
	viewSyncWait time.Duration
	// afterObserve, when set, runs after a pass read its views (tests).
	afterObserve func()

	// handles and nodes track candidates across passes, orphans the
	// claims to adopt; reset for each term of leadership.
	handles leaks.Tracker
	nodes   leaks.Tracker
	orphans leaks.Tracker
	loans   leaks.Tracker // loans without a record (loans.go)
	sticky  stickyState
	usable  map[string]uint64 // pool definition -> usable addresses
	// poolHist is what the pool metrics keep between passes.
	poolHist poolHistory

	// reconcileMu lets one term's loop end before the next one starts
	// (the elector does not wait for it).
	reconcileMu sync.Mutex
	guard       stallGuard
	// releaseWorkers is ReleaseWorkers; tests lower it.
	releaseWorkers int
	// stallsSeen is guard.count() when the trackers were last reset.
	stallsSeen int

	ready atomic.Bool
}

// New builds a controller; Start runs it.
func New(cfg Config) (*Controller, error) {
	if cfg.Client == nil || cfg.Open == nil {
		return nil, errors.New("controller: Client and Open are required")
	}
	if cfg.LeakGrace < 0 || cfg.Resync <= 0 {
		return nil, fmt.Errorf("controller: leak grace %v must be >= 0 and resync %v > 0", cfg.LeakGrace, cfg.Resync)
	}
	if cfg.Debounce <= 0 {
		cfg.Debounce = 500 * time.Millisecond
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Controller{cfg: cfg, log: cfg.Log, m: cfg.Metrics, trigger: make(chan struct{}, 1), usable: map[string]uint64{},
		releaseWorkers: ReleaseWorkers, viewSyncWait: viewSyncTimeout}
	c.resetTrackers()
	v, err := newAPIView(cfg.Client, cfg.Now, c.poke)
	if err != nil {
		return nil, err
	}
	c.view = v
	c.m.nodeNetwork.watch(v.nodes.GetStore())
	return c, nil
}

// poke asks for a pass soon.
func (c *Controller) poke() {
	select {
	case c.trigger <- struct{}{}:
	default:
	}
}

// Sync starts the informers, which run until Shutdown, and waits until
// they have listed pods and nodes; it reports false when ctx ended first.
func (c *Controller) Sync(ctx context.Context) bool {
	ok := c.view.start(ctx)
	c.ready.Store(ok)
	return ok
}

// Ready reports whether the informers have listed pods and nodes.
func (c *Controller) Ready() bool { return c.ready.Load() && c.view.synced() }

// Shutdown stops the informers and closes a datastore kept open.
func (c *Controller) Shutdown() {
	c.view.shutdown()
	c.stopView()
	c.storeMu.Lock()
	defer c.storeMu.Unlock()
	if c.store != nil {
		_ = c.store.Close()
		c.store = nil
	}
}

// Reconcile runs passes until ctx ends: one at once, then after events,
// when a tracked candidate's grace period ends, and every resync period.
// It starts from an empty tracker: candidates are first seen by its first
// pass. Call Sync first.
func (c *Controller) Reconcile(ctx context.Context) {
	c.reconcileMu.Lock()
	defer c.reconcileMu.Unlock()
	if ctx.Err() != nil {
		return
	}
	guardDone := c.guard.start(ctx)
	defer guardDone()
	c.resetTrackers()
	c.m.setLeading(true)
	defer c.m.setLeading(false)
	timer := time.NewTimer(0)
	defer timer.Stop()
	due := c.cfg.Now()
	var lastDuration time.Duration
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.trigger:
			// Soon, but not more than half of the time in passes.
			at := c.cfg.Now().Add(max(c.cfg.Debounce, lastDuration))
			if at.Before(due) {
				due = at
				timer.Reset(time.Until(due))
			}
			continue
		case <-timer.C:
		}
		start := c.cfg.Now()
		next, err := c.Pass(ctx)
		lastDuration = c.cfg.Now().Sub(start)
		if err != nil && ctx.Err() == nil {
			c.log.Error("reconcile pass failed", "err", err)
		}
		due = start.Add(c.cfg.Resync)
		if err != nil {
			due = c.cfg.Now().Add(min(c.cfg.Resync, max(time.Second, c.cfg.LeakGrace/4)))
		}
		if !next.IsZero() && next.Before(due) {
			due = next
		}
		if min := c.cfg.Now().Add(lastDuration); due.Before(min) {
			due = min
		}
		timer.Reset(time.Until(due))
	}
}

// resetTrackers forgets every candidate.
func (c *Controller) resetTrackers() {
	c.handles = leaks.Tracker{Grace: c.cfg.LeakGrace}
	c.nodes = leaks.Tracker{Grace: c.cfg.LeakGrace}
	c.orphans = leaks.Tracker{Grace: c.cfg.LeakGrace}
	c.loans = leaks.Tracker{Grace: c.loanGrace()}
	c.resetSticky()
	c.stallsSeen = c.guard.count()
}

// paused reports whether the process was paused since the trackers were
// last reset; if so it resets them, so that nothing is released before
// every candidate was seen leaked for a grace period after the pause.
func (c *Controller) paused() bool {
	if c.guard.count() == c.stallsSeen {
		return false
	}
	c.log.Warn("this process was paused: releases wait until leaks are confirmed again a grace period from now",
		"grace", c.cfg.LeakGrace.String())
	c.resetTrackers()
	return true
}

// openStore returns the datastore for one pass and what to call after it.
func (c *Controller) openStore(ctx context.Context) (store.Store, func(), error) {
	if !c.cfg.KeepOpen {
		st, err := c.cfg.Open(ctx)
		if err != nil {
			return nil, nil, err
		}
		return st, func() { _ = st.Close() }, nil
	}
	c.storeMu.Lock()
	defer c.storeMu.Unlock()
	if c.store == nil {
		st, err := c.cfg.Open(ctx)
		if err != nil {
			return nil, nil, err
		}
		c.store = st
	}
	return c.store, func() {}, nil
}

// ErrNotSynced is a pass's error before the informers have listed pods
// and nodes: in empty caches every allocation would look leaked.
var ErrNotSynced = errors.New("the informers have not listed pods and nodes yet")

// Pass runs one reconcile pass and returns when the next one is due for a
// pending candidate (zero when none is pending). Before the informers
// have synced it does nothing and fails with ErrNotSynced; while its view
// of the datastore is not synced, with ErrStoreNotSynced.
func (c *Controller) Pass(ctx context.Context) (next time.Time, err error) {
	start := c.cfg.Now()
	defer func() {
		c.m.reconcile.Observe(c.cfg.Now().Sub(start).Seconds())
		if err != nil {
			c.m.reconcileErrors.Inc()
		}
	}()
	if !c.view.synced() {
		return time.Time{}, ErrNotSynced
	}
	st, done, err := c.openStore(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("open datastore: %w", err)
	}
	defer done()
	// Releases read what they change afresh (the allocator remembers no
	// object from the view) and write it by compare-and-swap.
	a := allocator.New(st, c.log)
	c.paused() // a pause before this pass: no confirmation from before it counts

	// The store first, then the API's view: no handle is newer than it.
	sv := c.storeView(st)
	snap, err := c.observe(ctx, st, sv)
	if err != nil {
		return time.Time{}, fmt.Errorf("read the datastore: %w", err)
	}
	now := c.cfg.Now()
	view := c.view.snapshot()
	if c.afterObserve != nil {
		c.afterObserve()
	}
	hs := make([]ipam.Handle, len(snap.Handles))
	for i, o := range snap.Handles {
		hs[i] = o.Handle
	}
	found, stickyLeaks := withoutSticky(leaks.Find(hs, view))
	keys := make([]string, len(found))
	leakOf := make(map[string]leaks.Leak, len(found))
	for i, l := range found {
		k := leaks.Key(l.Handle)
		keys[i], leakOf[k] = k, l
	}
	byKey := make(map[string]allocator.Observed, len(found))
	for _, o := range snap.Handles {
		if _, ok := leakOf[leaks.Key(o.Handle)]; ok {
			byKey[leaks.Key(o.Handle)] = o
		}
	}
	c.m.leakCandidates.Set(float64(len(found)))
	confirmed, next := c.handles.Observe(now, keys)

	var gone []string
	for n := range snap.Affine {
		if view.NodeCount() > 0 && !view.NodeExists(n) {
			gone = append(gone, n)
		}
	}
	slices.Sort(gone)
	goneNodes, nextNode := c.nodes.Observe(now, gone)
	next = earliest(next, nextNode)
	adopt, nextAdopt := c.orphans.Observe(now, orphanKeys(snap.Orphans, gone))
	next = earliest(next, nextAdopt)

	if !sv.Synced() && (len(confirmed) > 0 || len(goneNodes) > 0 || len(adopt) > 0) {
		// Its watch failed since the pass read it.
		c.log.Warn("not releasing: the view of the datastore is not synced", "err", sv.Err(),
			"confirmed", len(confirmed), "nodes", len(goneNodes), "adopt", len(adopt))
		confirmed, goneNodes, adopt = nil, nil, nil
		next = earliest(next, now.Add(max(time.Second, c.cfg.LeakGrace/4)))
	}
	if len(confirmed) > 0 || len(goneNodes) > 0 {
		if why := c.stale(ctx, now); why != "" {
			c.log.Warn("not releasing: the API view may be stale", "why", why, "confirmed", len(confirmed), "nodes", len(goneNodes))
			if retry := now.Add(max(time.Second, c.cfg.LeakGrace/4)); next.IsZero() || retry.Before(next) {
				next = retry
			}
			confirmed, goneNodes = nil, nil
		}
	}
	// Before each release: the term may have ended (ctx), or the process
	// may have been paused and lost its Lease without knowing yet.
	retry := c.cfg.Now().Add(c.cfg.Debounce)
	c.releaseConfirmed(ctx, a, confirmed, byKey, leakOf)
	if err := ctx.Err(); err != nil {
		return next, err
	}
	if c.paused() {
		return retry, nil
	}
	for _, n := range goneNodes {
		if err := ctx.Err(); err != nil {
			return next, err
		}
		if c.paused() {
			return retry, nil
		}
		c.freeNode(ctx, a, n)
	}
	c.adoptOrphans(ctx, a, adopt)
	if err := ctx.Err(); err != nil {
		return next, err
	}
	next = earliest(next, c.stickyPass(ctx, a, snap.Handles, stickyLeaks, now))
	next = earliest(next, c.loanPass(ctx, st, sv))
	c.poolMetrics(snap, now)
	return next, nil
}

// earliest is the earlier of two due times, zero meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// stale says why the informers' caches may not be current ("" when they
// are): a watch failed within the grace period, or the API does not list
// nodes or pods now (one LIST of at most one of each: a watch that still
// runs says nothing of whether the next one could start).
func (c *Controller) stale(ctx context.Context, now time.Time) string {
	if c.view.watchErrorSince(now.Add(-c.cfg.LeakGrace)) {
		return "a watch of pods or nodes failed within the grace period"
	}
	if _, err := c.cfg.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		return "the API server does not list nodes: " + err.Error()
	}
	if _, err := c.cfg.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		return "the API server does not list pods: " + err.Error()
	}
	return ""
}

func podName(h ipam.Handle) string {
	if h.Pod == "" {
		return ""
	}
	return h.Namespace + "/" + h.Pod
}

func addrList(h ipam.Handle) string {
	as := make([]netip.Addr, len(h.IPs))
	for i, ip := range h.IPs {
		as[i] = ip.Addr
	}
	return joinAddrs(as)
}

func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}
