package webui

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/storeview"
)

// ErrNeedToken means the map would listen on an address other than
// loopback without a way to authenticate callers.
var ErrNeedToken = errors.New("webui: a bearer token is required when listening beyond loopback")

// TokenEnv names the environment variable ipkeeperctl ui reads the bearer
// token from when --token is not given.
const TokenEnv = "IPKEEPER_UI_TOKEN"

// DefaultPollInterval is how often the local store's file is looked at
// and a store that cannot be watched is listed.
const DefaultPollInterval = time.Second

// LeakCandidate is an address the controller suspects is leaked: held in
// the datastore by a handle whose pod or container is gone.
type LeakCandidate struct {
	// Addr is the suspected address.
	Addr netip.Addr `json:"addr"`
	// Handle is the handle that holds it ("" when none does).
	Handle string `json:"handle,omitempty"`
	// Pod is "namespace/name" of the pod the handle names, when known.
	Pod string `json:"pod,omitempty"`
	// Reason says why it is suspected, for a person.
	Reason string `json:"reason"`
	// Since is when it was first suspected.
	Since time.Time `json:"since"`
}

// LeakSource provides leak candidates; the controller implements it. The
// map asks about once a second, so it should answer from memory.
type LeakSource interface {
	LeakCandidates() []LeakCandidate
}

// Authenticator decides whether a bearer token may read the map, e.g. by a
// Kubernetes TokenReview. It is asked for every request that carries a
// token, so it should cache its answers.
type Authenticator func(ctx context.Context, token string) (bool, error)

// Options configures the address map.
type Options struct {
	// Datastore is the datastore to show. The local store is opened only
	// while it is read (its file lock would stall plugin calls), after its
	// file changed; etcd is opened once and watched; kubernetes is opened
	// once and listed every PollInterval.
	Datastore config.Datastore
	// Open opens Datastore (default datastore.Open as a long-running
	// process: without the node lock; it migrates a store of the first
	// layout).
	Open func(ctx context.Context, ds config.Datastore) (store.Store, error)
	// Store, when set, is used instead of opening Datastore: it is watched
	// when it can be (kvbacked on etcd), else listed every PollInterval.
	// It is not closed.
	Store store.Store
	// View, when set, is shown instead of Datastore and Store: a view of
	// the datastore someone else runs (the controller's, kept by the etcd
	// watch).
	View *storeview.View
	// Leaks provides leak candidates; nil shows none.
	Leaks LeakSource
	// Listen is the address the map is served on (host:port). When its
	// host is not a loopback address (or "localhost"), every request needs
	// the bearer token (or Authenticate's approval).
	Listen string
	// Token is the bearer token; with a loopback Listen it is optional
	// (when set it is required all the same).
	Token string
	// Authenticate, when set, also accepts tokens it approves.
	Authenticate Authenticator
	// PollInterval is how often the local store's file is checked for
	// changes, how often a store that cannot be watched is
	// listed — at least pollBackoff times the last listing's duration
	// apart — (default and minimum DefaultPollInterval) and how often leak
	// candidates are asked for.
	PollInterval time.Duration
	// Log receives errors reading the datastore (default: discarded).
	Log *slog.Logger
}

// UI is the address map: an http.Handler serving the page and its JSON
// API, and Run, which keeps its view of the datastore current.
type UI struct {
	opts      Options
	m         *model
	needToken bool
	cache     viewCache
	h         http.Handler
	limits    serverLimits

	feedMu sync.Mutex
	fd     feed // what Run follows the datastore with, once it started
}

// currentFeed returns the feed Run follows the datastore with (nil before
// Run opened the datastore).
func (u *UI) currentFeed() feed {
	u.feedMu.Lock()
	defer u.feedMu.Unlock()
	return u.fd
}

// New checks opts and returns the address map. Nothing is read until Run
// (or Serve) runs. It fails with ErrNeedToken when Listen is not loopback
// and neither Token nor Authenticate is set.
func New(opts Options) (*UI, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Open == nil {
		opts.Open = openStore
	}
	if opts.PollInterval < DefaultPollInterval {
		opts.PollInterval = DefaultPollInterval
	}
	need, err := NeedsToken(opts.Listen)
	if err != nil {
		return nil, err
	}
	if need && opts.Token == "" && opts.Authenticate == nil {
		return nil, fmt.Errorf("%w: listening on %s needs --token or $%s", ErrNeedToken, opts.Listen, TokenEnv)
	}
	u := &UI{opts: opts, m: newModel(opts.Log), needToken: need || opts.Token != "", limits: defaultLimits}
	u.h = u.handler()
	return u, nil
}

// Run keeps the map's view of the datastore current until ctx ends: it
// reads everything once, then follows changes (etcd and kubernetes: a
// watch; local: the file polled every PollInterval; a store without a
// watch: listed every PollInterval) and asks the LeakSource for candidates.
// Failures to read are shown on the page and retried; Run returns only
// ctx's error.
func (u *UI) Run(ctx context.Context) error {
	if u.opts.Leaks != nil {
		go u.pollLeaks(ctx)
	}
	f, closeFeed, err := u.feed(ctx)
	if err != nil {
		u.m.setStatus(err)
		<-ctx.Done()
		return ctx.Err()
	}
	defer closeFeed()
	u.feedMu.Lock()
	u.fd = f
	u.feedMu.Unlock()
	f.run(ctx)
	return ctx.Err()
}

func (u *UI) pollLeaks(ctx context.Context) {
	t := time.NewTicker(u.opts.PollInterval)
	defer t.Stop()
	for {
		u.m.setLeaks(slices.Clone(u.opts.Leaks.LeakCandidates()))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func sortLeaks(l []LeakCandidate) {
	slices.SortFunc(l, func(a, b LeakCandidate) int { return a.Addr.Compare(b.Addr) })
}

func leaksEqual(a, b []LeakCandidate) bool {
	return slices.EqualFunc(a, b, func(x, y LeakCandidate) bool {
		return x.Addr == y.Addr && x.Handle == y.Handle && x.Pod == y.Pod && x.Reason == y.Reason && x.Since.Equal(y.Since)
	})
}

// Handles returns the handles the map holds, each with its records in
// every node object merged (without their netns paths; their IPs are
// shared with the map, so must not be changed) and the
// generation they are of; loaded is false until the first full read of
// the datastore arrived. A leak source can look at these instead of
// reading the datastore again; Generation tells when to look again.
func (u *UI) Handles() (hs []ipam.Handle, gen uint64, loaded bool) {
	// Only the pointers are taken under the lock, so that the map's
	// updates do not wait for the copy (a handleState never changes once
	// it is in the map: a change puts a new one).
	u.m.mu.RLock()
	states := make([]*handleState, 0, len(u.m.handles))
	for _, h := range u.m.handles {
		states = append(states, h)
	}
	gen, loaded = u.m.gen, u.m.loaded
	u.m.mu.RUnlock()
	hs = make([]ipam.Handle, len(states))
	for i, h := range states {
		hs[i] = ipam.Handle{ID: h.id, Network: h.rec().Network, ContainerID: h.rec().ContainerID, IfName: h.rec().IfName,
			Node: h.node, Namespace: h.rec().Namespace, Pod: h.rec().Pod, PodUID: h.rec().PodUID, Created: h.rec().Created, IPs: h.ips,
			Sticky: h.rec().Sticky, Parked: h.rec().Parked}
	}
	return hs, gen, loaded
}

// Generation is the map's generation: it moves whenever what the map
// shows changes (and when leak candidates change).
func (u *UI) Generation() uint64 {
	gen, _ := u.m.wait()
	return gen
}
