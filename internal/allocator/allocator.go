package allocator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// Allocator allocates and releases addresses on the typed storage
// contract (package store, docs/STORAGE.md): every allocation and release
// touching only its node's blocks — dual-stack included — is one write of
// the node's object.
//
// The allocator keeps the last state of every node object it read or
// wrote: an allocation starts from it without a read and writes at its
// version, so that in the common case an ADD is exactly one write; when
// another writer changed the object meanwhile the write fails and the
// allocation is redone from a fresh read. A result that says the handle
// exists is never taken from that memory: it is read.
type Allocator struct {
	store store.Store
	log   *slog.Logger
	// nodeLocks serializes this process's allocations per node, so that
	// they build on each other's writes instead of conflicting.
	nodeLocks sync.Map // node -> *sync.Mutex
	// queues holds each node's allocations waiting for its lock, to be
	// committed together (batch.go).
	queues sync.Map // node -> *allocQueue
	// known holds the last state of node objects read or written.
	known sync.Map // node -> store.Node
	// claims holds the blocks each node is known to claim, for the claim
	// guard (claimguard.go).
	claims claimsKnown
	// pools caches pool definitions read for allocations (see
	// cachedPool); a conflict empties it.
	pools sync.Map // name -> cachedPool
	// poolReads joins concurrent reads of one pool missing from pools:
	// a node's first pods start together, and each would read it.
	poolReads singleflight.Group
	// PoolCacheTTL bounds how long a pool read for one allocation serves
	// the next ones: a pool's flags changed meanwhile (disabled, node
	// selector) take effect after at most this long in a long-lived
	// process. A pool marked for removal never needs it: the removal
	// writes the objects of the nodes holding its blocks, which fails
	// their allocations' writes and empties the cache.
	PoolCacheTTL time.Duration
	// MaxAttempts bounds the write attempts of one operation.
	MaxAttempts int
	// BaseBackoff and MaxBackoff bound the jittered wait between attempts.
	BaseBackoff, MaxBackoff time.Duration
	// Now is the clock used for handle timestamps.
	Now func() time.Time
}

// New returns an allocator over s. A nil logger discards logs.
func New(s store.Store, log *slog.Logger) *Allocator {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Allocator{store: s, log: log, MaxAttempts: 100, BaseBackoff: time.Millisecond, MaxBackoff: 50 * time.Millisecond, Now: time.Now, PoolCacheTTL: 5 * time.Second}
}

// Store returns the datastore the allocator works on.
func (a *Allocator) Store() store.Store { return a.store }

func (a *Allocator) retry(ctx context.Context, op string, attempt func() error) error {
	return retryConflicts(ctx, a.log, retryPolicy{a.MaxAttempts, a.BaseBackoff, a.MaxBackoff}, op, func() error {
		err := attempt()
		if errors.Is(err, store.ErrStale) {
			// What Remember was told came from another time or store.
			a.known.Clear()
			a.pools.Clear()
			a.claims.clear()
		}
		return err
	})
}

func (a *Allocator) lockNode(node string) func() {
	m, _ := a.nodeLocks.LoadOrStore(node, &sync.Mutex{})
	mu := m.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// readNode reads a node object; an absent one is empty, at Version "".
func (a *Allocator) readNode(ctx context.Context, name string) (store.Node, error) {
	n, err := a.store.GetNode(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		a.known.Delete(name)
		return store.Node{Name: name}, nil
	}
	if err != nil {
		return store.Node{}, storeErr(err)
	}
	a.known.Store(name, n)
	return n, nil
}

// Remember tells the allocator of objects its caller has just read
// (datastore.Open's read with the layout marker, Options.Warm): the node object,
// which the next allocation on it uses as if it had read it (its write
// still a compare-and-swap on the version read: a change since conflicts
// and is read), the pools, cached as if read now, and claims of the node,
// known to hold while the object is at that version (the opener either read
// them or makes its first write require them). An absent node object
// (Version "") is not remembered.
func (a *Allocator) Remember(n store.Node, pools []store.Pool, claims ...store.Claim) {
	if n.Name != "" && n.Version != "" {
		a.known.Store(n.Name, n)
		blocks := map[store.BlockRef]bool{}
		for _, c := range claims {
			if c.Node == n.Name {
				blocks[c.BlockRef] = true
			}
		}
		a.claims.learn(n.Name, n.Version, blocks)
	}
	for _, p := range pools {
		a.pools.Store(p.Spec.Name, cachedPool{pool: p.Spec, read: a.Now(), told: true})
	}
}

// cachePools caches pools as read now.
func (a *Allocator) cachePools(pools []store.Pool) {
	for _, p := range pools {
		a.cachePool(p.Spec)
	}
}

// forgetTold drops the cached pools of names that Remember told of (not
// read by this process) and reports whether there were any: a refusal
// decided on them (exhausted, a reserved address) is decided again on
// the pools as stored, since a write, which would have found them stale,
// never came.
func (a *Allocator) forgetTold(names []string) bool {
	told := false
	for _, n := range names {
		if v, ok := a.pools.Load(n); ok && v.(cachedPool).told {
			a.pools.Delete(n)
			told = true
		}
	}
	return told
}

// cachePool caches p as read now.
func (a *Allocator) cachePool(p ipam.Pool) {
	a.pools.Store(p.Name, cachedPool{pool: p, read: a.Now()})
}

// freshPool returns the cached pool name when it was read less than
// PoolCacheTTL ago.
func (a *Allocator) freshPool(name string) (ipam.Pool, bool) {
	v, ok := a.pools.Load(name)
	if !ok {
		return ipam.Pool{}, false
	}
	c := v.(cachedPool)
	return c.pool, a.Now().Sub(c.read) < a.PoolCacheTTL
}

// lastKnown returns the node object as this process last saw it.
func (a *Allocator) lastKnown(name string) (store.Node, bool) {
	v, ok := a.known.Load(name)
	if !ok {
		return store.Node{}, false
	}
	return v.(store.Node), true
}

// writeNode creates (Version "") or updates a node object and remembers
// what it wrote; on a conflict it forgets the object.
func (a *Allocator) writeNode(ctx context.Context, n store.Node) (store.Node, error) {
	var out store.Node
	var err error
	switch {
	case n.Version == "" && len(n.Blocks) == 0 && len(n.Handles) == 0 && len(n.Loans) == 0:
		return n, nil // nothing to store
	case n.Version == "":
		out, err = a.store.CreateNode(ctx, n)
		if errors.Is(err, store.ErrExists) {
			err = fmt.Errorf("%w: %w", store.ErrConflict, err)
		}
	case len(n.Blocks) == 0 && len(n.Handles) == 0 && len(n.Loans) == 0:
		err = goneIsConflict(a.store.DeleteNode(ctx, n))
		out = store.Node{Name: n.Name}
	default:
		out, err = a.store.UpdateNode(ctx, n)
		err = goneIsConflict(err)
	}
	if err != nil {
		a.known.Delete(n.Name)
		if errors.Is(err, store.ErrConflict) {
			a.pools.Clear()
		}
		return store.Node{}, storeErr(err)
	}
	a.claims.advance(n.Name, n.Version, out.Version)
	if out.Version == "" {
		a.known.Delete(n.Name)
	} else {
		a.known.Store(n.Name, out)
	}
	return out, nil
}

// goneIsConflict makes the error of a write that found its object
// deleted (store.ErrNotFound) a conflict too, so that the retry re-reads
// the object.
func goneIsConflict(err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %w", store.ErrConflict, err)
	}
	return err
}

// updatePool is UpdatePool whose object found deleted is a conflict
// (goneIsConflict).
func (a *Allocator) updatePool(ctx context.Context, p store.Pool) (store.Pool, error) {
	out, err := a.store.UpdatePool(ctx, p)
	return out, goneIsConflict(err)
}

// storeErr maps a stored object that cannot be used to ErrCorrupt, keeping
// the store's own error in the chain.
func storeErr(err error) error {
	if errors.Is(err, store.ErrCorrupt) && !errors.Is(err, ErrCorrupt) {
		return fmt.Errorf("%w: %w ('ipkeeperctl check' reports it)", ErrCorrupt, err)
	}
	return err
}

// handleOf assembles a handle from its record in the node's own object and
// its records in the lenders' objects its loans name. It reports false
// when the node holds neither a record nor a loan of id.
func (a *Allocator) handleOf(ctx context.Context, own store.Node, id string) (ipam.Handle, bool, error) {
	h, _, ok, err := a.handleParts(ctx, own, id)
	return h, ok, err
}

// handleParts is handleOf that also returns each record assembled, with
// the object holding it.
func (a *Allocator) handleParts(ctx context.Context, own store.Node, id string) (ipam.Handle, []ObservedPart, bool, error) {
	h, ok := own.Handle(id)
	lenders := own.LendersOf(id)
	if !ok && len(lenders) == 0 {
		return ipam.Handle{}, nil, false, nil
	}
	var parts []ObservedPart
	if ok {
		parts = append(parts, ObservedPart{Object: own.Name, Record: h})
	}
	for _, l := range lenders {
		ln, err := a.store.GetNode(ctx, l)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return ipam.Handle{}, nil, false, storeErr(err)
		}
		r, found := ln.Handle(id)
		if !found || r.Node != own.Name {
			continue
		}
		parts = append(parts, ObservedPart{Object: l, Record: r})
		if !ok {
			h, ok = r, true
			continue
		}
		h.IPs = append(slices.Clone(h.IPs), r.IPs...)
	}
	if !ok {
		// Loans without records: what an ADD that stopped between its
		// writes leaves.
		return ipam.Handle{ID: id, Node: own.Name}, nil, true, nil
	}
	return h, parts, true, nil
}

// cachedPool is a pool definition as read at a time.
type cachedPool struct {
	pool ipam.Pool
	read time.Time
	// told: from Remember, not read by this process.
	told bool
}

// poolForAllocation returns a pool for an allocation: from the cache when
// read less than PoolCacheTTL ago, else read (and cached) — once for all
// the allocations that miss it together. A caller whose context is still
// live when the shared read failed on its starter's context reads again.
func (a *Allocator) poolForAllocation(ctx context.Context, name string) (ipam.Pool, error) {
	if p, ok := a.freshPool(name); ok {
		return p, nil
	}
	read := func(ctx context.Context) (ipam.Pool, error) {
		p, err := a.poolMaybeStale(ctx, name)
		if err == nil {
			a.cachePool(p)
		}
		return p, err
	}
	select {
	case r := <-a.poolReads.DoChan(name, func() (any, error) { return read(ctx) }):
		if r.Err != nil && ctx.Err() == nil && (errors.Is(r.Err, context.Canceled) || errors.Is(r.Err, context.DeadlineExceeded)) {
			return read(ctx)
		}
		if r.Err != nil {
			return ipam.Pool{}, r.Err
		}
		return r.Val.(ipam.Pool), nil
	case <-ctx.Done():
		return ipam.Pool{}, ctx.Err()
	}
}

// PoolForAllocation returns pool name as an allocation reads it: from
// the pools read for allocations less than PoolCacheTTL ago, else from
// the store's cache when it has one (cachedPoolReader), else read. A
// config's named pools are resolved through it, so that the allocation
// that follows reads them no more.
func (a *Allocator) PoolForAllocation(ctx context.Context, name string) (ipam.Pool, error) {
	return a.poolForAllocation(ctx, name)
}

// cachedPoolReader is a store that reads a pool from a cache that may lag
// behind writes (the Kubernetes API server's watch cache) for less than a
// read of the latest state.
type cachedPoolReader interface {
	GetPoolCached(ctx context.Context, name string) (store.Pool, error)
}

// poolMaybeStale reads a pool for poolForAllocation, from the store's
// cache when it has one: a stale pool is what that cache holds anyway,
// and a claim reads the pool again, up to date (createClaim).
func (a *Allocator) poolMaybeStale(ctx context.Context, name string) (ipam.Pool, error) {
	if c, ok := a.store.(cachedPoolReader); ok {
		return readPool(ctx, name, c.GetPoolCached)
	}
	return a.Pool(ctx, name)
}

// poolsInMemory is a store that answers the pool reads of allocations
// (GetPoolCached) from memory while PoolsInMemory reports true (the
// agent's watch of its pools): a list of them would save no request.
type poolsInMemory interface {
	PoolsInMemory() bool
}

// prefetchPools reads every pool in one list when more than one of names
// is not cached: a cold dual-stack ADD then pays one request for its
// pools instead of one per pool.
func (a *Allocator) prefetchPools(ctx context.Context, names []string) error {
	if m, ok := a.store.(poolsInMemory); ok && m.PoolsInMemory() {
		return nil
	}
	missing := 0
	for _, n := range names {
		if _, ok := a.freshPool(n); !ok {
			missing++
		}
	}
	if missing < 2 {
		return nil
	}
	all, err := a.store.ListPools(ctx)
	if err != nil {
		return storeErr(err)
	}
	a.cachePools(all)
	return nil
}
