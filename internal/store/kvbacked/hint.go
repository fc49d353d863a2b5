package kvbacked

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
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

// NodeHint is a node object as one process last read or wrote it, kept
// for the next short-lived process of the same node (the plugin's hint
// file, internal/datastore): the node object's stored bytes and version,
// and the identity of the store they came from.
//
// A hint is never trusted, only used to skip a read: ReadLayoutWarm takes
// it for the node object only when the store it reads has the hint's
// identity, and every write computed from it is a compare-and-swap of the
// node key at the hinted version, which fails (and the allocator reads the
// object) once anybody else wrote the object.
type NodeHint struct {
	// Store is the store's identity (EnsureStoreID), "" when not known.
	Store   string
	Node    string
	Version store.Version
	Value   []byte
	// Wrote is true when the process wrote the object (not only read
	// it): only then does the datastore give the store an identity.
	Wrote bool
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

// StoreID reads the store's identity; "" when it has none yet.
func StoreID(ctx context.Context, s kv.Store) (string, error) {
	es, err := s.Get(ctx, storeKey)
	if err != nil {
		return "", mapErr("read the store identity", err)
	}
	return string(es[0].Value), nil
}

// EnsureStoreID returns the store's identity, writing a new random one
// (only if it has none, so that every process agrees on the first) when it
// has none.
func EnsureStoreID(ctx context.Context, s kv.Store) (string, error) {
	for range 3 {
		id, err := StoreID(ctx, s)
		if err != nil || id != "" {
			return id, err
		}
		var b [16]byte
		_, _ = rand.Read(b[:])
		id = hex.EncodeToString(b[:])
		err = s.Txn(ctx, []kv.Cond{{Key: storeKey}}, []kv.Op{{Key: storeKey, Value: []byte(id)}})
		switch {
		case err == nil:
			return id, nil
		case !errors.Is(err, kv.ErrConflict):
			return "", mapErr("write the store identity", err)
		}
	}
	return "", fmt.Errorf("%w: write the store identity: %s kept changing", store.ErrConflict, storeKey)
}

// tracker keeps what a Store last read or wrote of one node object (Track).
type tracker struct {
	mu   sync.Mutex
	node string
	hint NodeHint
	ok   bool
}

// Track makes s remember the stored bytes and version of node's object as
// s last read or wrote it, from seed on (seed.Node == node; anything else
// starts from nothing known); Tracked returns it.
func (s *Store) Track(node string, seed NodeHint) {
	s.track.mu.Lock()
	defer s.track.mu.Unlock()
	s.track.node = node
	s.track.hint, s.track.ok = NodeHint{}, false
	if seed.Node == node && len(seed.Value) > 0 {
		if _, ok := parseVersion(seed.Version); ok {
			s.track.hint, s.track.ok = seed, true
		}
	}
}

// Tracked returns the tracked node object as last read or written by s;
// false when not known (never read, absent, deleted, or a write whose
// outcome or version s cannot tell).
func (s *Store) Tracked() (NodeHint, bool) {
	s.track.mu.Lock()
	defer s.track.mu.Unlock()
	return s.track.hint, s.track.ok
}

// observe records node's object: its stored bytes at version v (v "" or
// unknownVersion: not known). wrote says s wrote it.
func (s *Store) observe(node string, val []byte, v store.Version, wrote bool) {
	s.track.mu.Lock()
	defer s.track.mu.Unlock()
	if node == "" || node != s.track.node {
		return
	}
	if _, ok := parseVersion(v); !ok || val == nil || v == unknownVersion {
		wrote = wrote || s.track.hint.Wrote
		s.track.hint, s.track.ok = NodeHint{Node: node, Wrote: wrote}, false
		return
	}
	s.track.hint = NodeHint{Store: s.track.hint.Store, Node: node, Version: v, Value: val, Wrote: wrote || s.track.hint.Wrote}
	s.track.ok = true
}
