package kvbacked

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// storeKey holds the store's identity: random bytes written once, by the
// first process that keeps a NodeHint (EnsureStoreID). A hint names the
// identity of the store it was read from, so that a hint of another store
// (an etcd wiped and set up again at the same endpoints, whose revisions
// start over and may repeat the hinted version) is never taken for this
// one's.
const storeKey = metaPrefix + "store"

// NodeHint is what one process last read or wrote of a node object and
// of pools, kept for the next short-lived process of the same node (the
// plugin's hint file, internal/datastore): the objects' stored bytes and
// versions, the layout marker's version and the identity of the store
// they came from.
//
// A hint is never trusted, only used to skip reads. ReadLayoutWarm takes
// the node object from it only when the store it reads has the hint's
// identity, and reads the hinted claims with the marker. TakeHint takes
// everything from it (no read at all) and guards the first write with
// what it took: the layout marker's version, the store's identity (its
// value), the pools' versions and the node's claims (version and value,
// which names the node), besides the write's own compare-and-swap of the
// node object at the hinted version. A write that fails these checks
// wraps store.ErrStale, so that the allocator forgets what it was told
// and reads.
type NodeHint struct {
	// Store is the store's identity (EnsureStoreID), "" when not known,
	// and StoreAt the version of the key holding it.
	Store   string
	StoreAt store.Version
	// Layout is the layout marker's version.
	Layout  store.Version
	Node    string
	Version store.Version
	Value   []byte
	// Pools are pools as read or written, with their versions.
	Pools []PoolHint
	// Claims are claims of the node as read or written, with their
	// versions, sorted by block.
	Claims []ClaimHint
	// Wrote is true when the process wrote the object (not only read
	// it): only then does the datastore give the store an identity.
	Wrote bool
	// read is the node object as read (ReadLayoutWarm) at Version, when
	// Value is not made yet: its encoding is made if Tracked asks.
	read *store.Node
}

// PoolHint is a pool as one process last read or wrote it.
type PoolHint struct {
	Name    string
	Version store.Version
	Value   []byte
	// Reserved is the pool's reservations key as stored at Version (nil:
	// none). Every reservation write puts the pool's key too, so the
	// pool's version names its reservations as well.
	Reserved []byte
}

// ClaimHint is a claim of the hint's node as one process last read or
// wrote it.
type ClaimHint struct {
	Ref     store.BlockRef
	Version store.Version
}

// usable reports whether h can stand for node's object read from a store
// whose identity is storeID.
func (h *NodeHint) usable(node string) bool {
	if h == nil || h.Node != node || h.Store == "" || len(h.Value) == 0 {
		return false
	}
	_, ok := parseVersion(h.Version)
	return ok
}

// StoreID reads the store's identity and the version of the key holding
// it; "" when it has none yet.
func StoreID(ctx context.Context, s kv.Store) (string, store.Version, error) {
	es, err := s.Get(ctx, storeKey)
	if err != nil {
		return "", "", mapErr("read the store identity", err)
	}
	if es[0].Version == 0 {
		return "", "", nil
	}
	return string(es[0].Value), version(es[0].Version), nil
}

// EnsureStoreID returns the store's identity and its key's version,
// writing a new random one (only if it has none, so that every process
// agrees on the first) when it has none.
func EnsureStoreID(ctx context.Context, s kv.Store) (string, store.Version, error) {
	for range 3 {
		id, at, err := StoreID(ctx, s)
		if err != nil || id != "" {
			return id, at, err
		}
		var b [16]byte
		_, _ = rand.Read(b[:])
		id = hex.EncodeToString(b[:])
		rev, err := kv.TxnRevision(ctx, s, []kv.Cond{{Key: storeKey}}, []kv.Op{{Key: storeKey, Value: []byte(id)}})
		switch {
		case err == nil && rev > 0:
			return id, version(rev), nil
		case err == nil:
			continue // written; its version is read back
		case !errors.Is(err, store.ErrConflict):
			return "", "", mapErr("write the store identity", err)
		}
	}
	return "", "", fmt.Errorf("%w: write the store identity: %s kept changing", store.ErrConflict, storeKey)
}

// LayoutVersion returns the version of the layout marker of a store of
// the typed layout ("" for another layout).
func LayoutVersion(ctx context.Context, s kv.Store) (store.Version, error) {
	es, err := s.Get(ctx, MarkerKey)
	if err != nil {
		return "", mapErr("read the layout marker", err)
	}
	if l, err := layoutOf(es[0]); err != nil || l != LayoutTyped {
		return "", err
	}
	return version(es[0].Version), nil
}

// tracker keeps what a Store last read or wrote of one node object and of
// pools (Track).
type tracker struct {
	mu   sync.Mutex
	node string
	hint NodeHint
	ok   bool
	// pending is the node object last read or written, whose encoding
	// hint.Value takes only when Tracked asks for it: a long-lived store
	// writes a node many times and is asked for its hint once, at close,
	// and a node object's encoding grows with its records.
	pending *store.Node
	pools   map[string]PoolHint
	claims  map[store.BlockRef]store.Version
}

// Track makes s remember the stored bytes and version of node's object,
// of the pools it reads or writes and the node's claims it reads, creates
// or deletes, as s last read or wrote them, from seed on (seed.Node ==
// node; anything else starts from nothing known); Tracked returns them.
func (s *Store) Track(node string, seed NodeHint) {
	s.track.mu.Lock()
	defer s.track.mu.Unlock()
	s.track.node = node
	s.track.hint, s.track.ok, s.track.pending = NodeHint{}, false, nil
	s.track.pools = map[string]PoolHint{}
	s.track.claims = map[store.BlockRef]store.Version{}
	if seed.Node != node {
		return
	}
	s.track.hint.Store, s.track.hint.StoreAt, s.track.hint.Layout = seed.Store, seed.StoreAt, seed.Layout
	for _, p := range seed.Pools {
		s.track.pools[p.Name] = p
	}
	for _, c := range seed.Claims {
		s.track.claims[c.Ref] = c.Version
	}
	if _, ok := parseVersion(seed.Version); ok && (len(seed.Value) > 0 || seed.read != nil) {
		s.track.hint.Node, s.track.hint.Version, s.track.hint.Value = node, seed.Version, seed.Value
		s.track.ok = true
		if len(seed.Value) == 0 {
			s.track.pending = seed.read
		}
	}
}

// Tracked returns the tracked node object and pools as last read or
// written by s; false when the node object is not known (never read,
// absent, deleted, or a write whose outcome or version s cannot tell).
func (s *Store) Tracked() (NodeHint, bool) {
	s.track.mu.Lock()
	defer s.track.mu.Unlock()
	if n := s.track.pending; n != nil {
		s.track.pending = nil
		val, err := store.MarshalStored(*n)
		if err != nil {
			s.track.hint.Version, s.track.hint.Value = "", nil
			s.track.ok = false
		} else {
			s.track.hint.Value = val
		}
	}
	h := s.track.hint
	h.Pools = nil
	for _, p := range s.track.pools {
		h.Pools = append(h.Pools, p)
	}
	slices.SortFunc(h.Pools, func(a, b PoolHint) int { return strings.Compare(a.Name, b.Name) })
	h.Claims = nil
	for ref, v := range s.track.claims {
		h.Claims = append(h.Claims, ClaimHint{Ref: ref, Version: v})
	}
	slices.SortFunc(h.Claims, func(a, b ClaimHint) int { return a.Ref.Compare(b.Ref) })
	return h, s.track.ok
}

// forget drops everything tracked: the store is not what the tracked
// state says.
func (s *Store) forget() {
	s.track.mu.Lock()
	defer s.track.mu.Unlock()
	s.track.hint, s.track.ok, s.track.pools = NodeHint{Node: s.track.node}, false, map[string]PoolHint{}
	s.track.pending = nil
	s.track.claims = map[store.BlockRef]store.Version{}
}

// observe records node's object: its stored bytes at version v (v "" or
// unknownVersion: not known). wrote says s wrote it.
func (s *Store) observe(node string, val []byte, v store.Version, wrote bool) {
	s.track.mu.Lock()
	defer s.track.mu.Unlock()
	if node == "" || node != s.track.node {
		return
	}
	wrote = wrote || s.track.hint.Wrote
	s.track.pending = nil
	if _, ok := parseVersion(v); !ok || val == nil || v == unknownVersion {
		s.track.hint.Version, s.track.hint.Value, s.track.hint.Wrote = "", nil, wrote
		s.track.ok = false
		return
	}
	s.track.hint.Node, s.track.hint.Version, s.track.hint.Value, s.track.hint.Wrote = node, v, val, wrote
	s.track.ok = true
}

// observeNode records node n as read or written; its encoding is made
// when Tracked asks for it.
func (s *Store) observeNode(n store.Node, wrote bool) {
	s.track.mu.Lock()
	defer s.track.mu.Unlock()
	if n.Name == "" || n.Name != s.track.node {
		return
	}
	wrote = wrote || s.track.hint.Wrote
	if _, ok := parseVersion(n.Version); !ok || n.Version == unknownVersion {
		s.track.hint.Version, s.track.hint.Value, s.track.hint.Wrote = "", nil, wrote
		s.track.ok, s.track.pending = false, nil
		return
	}
	s.track.hint.Node, s.track.hint.Version, s.track.hint.Value, s.track.hint.Wrote = n.Name, n.Version, nil, wrote
	s.track.ok, s.track.pending = true, &n
}

// observePool records pool name as stored with its reservations key's
// value (val nil: gone or not known).
func (s *Store) observePool(name string, val, reserved []byte, v store.Version) {
	s.track.mu.Lock()
	defer s.track.mu.Unlock()
	if s.track.pools == nil {
		return // not tracking
	}
	if _, ok := parseVersion(v); !ok || val == nil || v == unknownVersion {
		delete(s.track.pools, name)
		return
	}
	s.track.pools[name] = PoolHint{Name: name, Version: v, Value: val, Reserved: reserved}
}

// observePoolUpdate records pool name written as val at version v by a
// write guarded at version from: its reservations are those tracked at
// from (a reservation written meanwhile would have moved the pool's
// version), unknown when from is not the version tracked.
func (s *Store) observePoolUpdate(name string, val []byte, from, v store.Version) {
	s.track.mu.Lock()
	prev, ok := s.track.pools[name]
	s.track.mu.Unlock()
	if !ok || prev.Version != from {
		s.observePool(name, nil, nil, "")
		return
	}
	s.observePool(name, val, prev.Reserved, v)
}

// observeClaim records the claim of block ref as read or written: held
// by node at version v, or (node "") gone or not known.
func (s *Store) observeClaim(ref store.BlockRef, node string, v store.Version) {
	s.track.mu.Lock()
	defer s.track.mu.Unlock()
	if s.track.claims == nil {
		return // not tracking
	}
	if _, ok := parseVersion(v); !ok || node != s.track.node || v == unknownVersion {
		delete(s.track.claims, ref)
		return
	}
	s.track.claims[ref] = v
}

// observeNodeClaims records a list of node's claims: all it has.
func (s *Store) observeNodeClaims(node string, claims []store.Claim) {
	s.track.mu.Lock()
	defer s.track.mu.Unlock()
	if s.track.claims == nil || node != s.track.node {
		return
	}
	s.track.claims = map[store.BlockRef]store.Version{}
	for _, c := range claims {
		if _, ok := parseVersion(c.Version); ok && c.Node == node && c.Version != unknownVersion {
			s.track.claims[c.BlockRef] = c.Version
		}
	}
}
