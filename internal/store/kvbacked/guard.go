package kvbacked

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// guard holds what TakeHint took on trust, until a read or a write has
// checked it against the store.
type guard struct {
	mu sync.Mutex
	// conds guard the next transaction: the layout marker at its hinted
	// version and value, the identity key at its hinted version and value,
	// every hinted pool at its version. nil once a transaction passed them.
	conds []kv.Cond
	// checked: a read has checked the layout marker and the identity (the
	// pools are left to conds).
	checked bool
	store   string
}

// TakeHint makes s serve w from w.Hint alone, reading nothing, when the
// hint holds all of it: the node object, every pool of w.Pools, the layout
// marker's version and the store's identity with its key's version. The
// first transaction s runs afterwards is guarded by all of these besides
// its own conditions (a pool's version names its reservations too) — and by the hinted claims of the node it returns
// (Warmed.Claims: each claim at its version, its value naming the node),
// so that a hint naming a block the node does not claim costs a conflict
// — and the first read first checks the marker and the identity. A guarded transaction whose guard fails returns an error
// wrapping store.ErrConflict and store.ErrStale (the caller forgets what it
// was told and reads), or store.ErrUnavailable when the store no longer
// has this layout. It reports false, taking nothing, when the hint does
// not hold everything.
func (s *Store) TakeHint(w Warm) (Warmed, bool) {
	h := w.Hint
	if !h.usable(w.Node) {
		return Warmed{}, false
	}
	lv, ok1 := parseVersion(h.Layout)
	sv, ok2 := parseVersion(h.StoreAt)
	if !ok1 || !ok2 {
		return Warmed{}, false
	}
	out := Warmed{OK: true, Store: h.Store, Hint: *h, Hinted: true, Unread: true}
	conds := []kv.Cond{{Key: MarkerKey, Version: lv, Value: []byte(MarkerValue)}, {Key: storeKey, Version: sv, Value: []byte(h.Store)}}
	for _, name := range w.Pools {
		if store.ValidName("pool", name) != nil {
			continue
		}
		i := slices.IndexFunc(h.Pools, func(p PoolHint) bool { return p.Name == name })
		if i < 0 {
			return Warmed{}, false // a pool the hint does not know (perhaps not created yet)
		}
		ph := h.Pools[i]
		v, ok := parseVersion(ph.Version)
		if !ok {
			return Warmed{}, false
		}
		res := kv.KeyValue{Key: reservationsKey(name), Value: ph.Reserved}
		if ph.Reserved != nil {
			res.Version = v
		}
		p, err := decodePoolWith(kv.KeyValue{Key: poolKey(name), Value: ph.Value, Version: v}, res)
		if err != nil {
			return Warmed{}, false
		}
		out.Pools = append(out.Pools, p)
		conds = append(conds, kv.Cond{Key: poolKey(name), Version: v})
	}
	n, err := hintedNode(w.Node, h.Value, h.Version)
	if err != nil {
		return Warmed{}, false
	}
	out.Node = n
	budget := s.lim.MaxOps / 2
	if budget <= 0 {
		budget = 2 * maxGuardClaims
	}
	for _, c := range claimsFirst(n, h.Claims) {
		v, ok := parseVersion(c.Version)
		cl := store.Claim{BlockRef: c.Ref, Node: w.Node, Version: c.Version}
		if _, err := store.EncodeClaim(cl); !ok || err != nil {
			continue
		}
		if len(out.Claims) == maxGuardClaims || guardCompares(conds)+2 > budget {
			break
		}
		// The value names the node: a claim of another node at that
		// version fails the guard.
		conds = append(conds, kv.Cond{Key: claimKey(c.Ref), Version: v, Value: claimValue(cl)})
		out.Claims = append(out.Claims, cl)
	}
	s.guard.mu.Lock()
	s.guard.conds, s.guard.checked, s.guard.store = conds, false, h.Store
	s.guard.mu.Unlock()
	return out, true
}

// guarded returns the conditions the next transaction carries besides
// its own (nil when nothing is taken on trust).
func (s *Store) guarded() []kv.Cond {
	s.guard.mu.Lock()
	defer s.guard.mu.Unlock()
	return s.guard.conds
}

// settle ends a guarded transaction: passed, nothing is on trust any more;
// failed, the marker and the identity are read to tell a store of another
// layout (ErrUnavailable) from stale remembered state (ErrStale, with the
// conflict), and nothing is on trust any more either.
func (s *Store) settle(ctx context.Context, what string, err error) error {
	s.guard.mu.Lock()
	s.guard.conds = nil
	s.guard.mu.Unlock()
	if err == nil || !failedCond(err) {
		return err
	}
	if cerr := s.checkLayout(ctx); cerr != nil {
		return cerr
	}
	s.forget()
	// With ErrStale: a create then reports this conflict, not ErrExists,
	// which callers handle as "someone else has it" without forgetting
	// what they were told.
	return fmt.Errorf("%w: %w: %s: %v", store.ErrConflict, store.ErrStale, what, err)
}

// checkRead checks, before the first read after TakeHint, that the store
// still has the typed layout and the hint's identity: a read of another
// store's objects would mix them with what the hint said. A store of
// another identity is ErrStale (with ErrConflict: the caller forgets what
// it remembers and retries).
func (s *Store) checkRead(ctx context.Context) error {
	s.guard.mu.Lock()
	pending := s.guard.conds != nil && !s.guard.checked
	s.guard.mu.Unlock()
	if !pending {
		return nil
	}
	if err := s.checkLayout(ctx); err != nil {
		return err
	}
	s.guard.mu.Lock()
	defer s.guard.mu.Unlock()
	s.guard.checked = true
	return nil
}

// checkLayout reads the layout marker and the identity: another layout is
// ErrUnavailable, another identity ErrStale (and ErrConflict), and drops
// what was taken on trust.
func (s *Store) checkLayout(ctx context.Context) error {
	es, err := s.kv.Get(ctx, MarkerKey, storeKey)
	if err != nil {
		return mapErr("read the layout marker", err)
	}
	if l, err := layoutOf(es[0]); err != nil || l != LayoutTyped {
		s.forget()
		s.dropGuard()
		return fmt.Errorf("%w: the datastore's layout changed during this call (%s holds %q); try again", store.ErrUnavailable, MarkerKey, es[0].Value)
	}
	s.guard.mu.Lock()
	id := s.guard.store
	s.guard.mu.Unlock()
	if id != "" && !bytes.Equal(es[1].Value, []byte(id)) {
		s.forget()
		s.dropGuard()
		return fmt.Errorf("%w: %w: the datastore is not the one this node's hint came from (wiped or replaced)", store.ErrConflict, store.ErrStale)
	}
	return nil
}

// dropGuard drops what was taken on trust.
func (s *Store) dropGuard() {
	s.guard.mu.Lock()
	s.guard.conds, s.guard.store = nil, ""
	s.guard.mu.Unlock()
}

// maxGuardClaims bounds the claims a hint's first write requires (each is
// two compares of the transaction's; etcd allows 128 by default).
const maxGuardClaims = 16

// claimsFirst orders hinted claims for the guard: blocks of n with free
// addresses first (those an allocation takes from), then the others.
func claimsFirst(n store.Node, claims []ClaimHint) []ClaimHint {
	out := slices.Clone(claims)
	useful := func(c ClaimHint) bool {
		b, ok := n.Block(c.Ref)
		return ok && len(b.Free) > 0
	}
	slices.SortStableFunc(out, func(a, b ClaimHint) int {
		switch ua, ub := useful(a), useful(b); {
		case ua == ub:
			return 0
		case ua:
			return -1
		}
		return 1
	})
	return out
}

// guardCompares counts conds as kv.Limits.MaxOps does (a condition on a
// value is two compares).
func guardCompares(conds []kv.Cond) int {
	n := len(conds)
	for _, c := range conds {
		if c.Value != nil {
			n++
		}
	}
	return n
}
