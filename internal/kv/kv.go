// Package kv defines the versioned key-value contract of ipkeeper's two
// key-value backends, the local bbolt file (store/local) and etcd
// (store/etcd): values under string keys, written only through Txn, a
// compare-and-swap transaction over one or more keys. The typed store on
// them (store/kvbacked) writes one object with its index keys in one Txn.
//
// Errors are the store package's sentinels, so that one family reaches
// every caller: a Txn whose condition failed returns an error wrapping
// store.ErrConflict (nothing was written; re-read and retry), and a
// backend that cannot be reached or used (connection refused, timeouts,
// a lock not taken in time) returns errors wrapping store.ErrUnavailable.
package kv

import "context"

// KeyValue is one stored entry. Version is 0 when the key does not exist
// and otherwise a positive number that changes on every write of the key
// (a modification revision).
type KeyValue struct {
	Key     string
	Value   []byte
	Version int64
}

// Cond requires Key to be at Version when the transaction commits.
// Version 0 means the key must not exist.
type Cond struct {
	Key     string
	Version int64
	// Value, when not nil, also requires the key's value to be exactly
	// these bytes (a condition that a missing key never meets). A caller
	// that computed a write from a value it did not read from the store
	// itself (a remembered hint) guards the write with that value, so the
	// commit proves the value right instead of trusting it.
	Value []byte
}

// Op is one write of a transaction: a put of Value, or a delete.
type Op struct {
	Key    string
	Value  []byte
	Delete bool
}

// Store is a versioned key-value datastore.
//
// Implementations must make Txn atomic and durable: when it returns nil,
// every Op is applied and survives a crash; when it returns an error, none
// is. Keys are arbitrary non-empty strings without NUL bytes.
type Store interface {
	// Get returns one entry per key, in the order asked. A missing key
	// yields an entry with that Key, nil Value and Version 0.
	Get(ctx context.Context, keys ...string) ([]KeyValue, error)
	// List returns every entry whose key starts with prefix, sorted by key.
	List(ctx context.Context, prefix string) ([]KeyValue, error)
	// Txn applies ops if every cond holds, atomically. It returns an error
	// wrapping store.ErrConflict when a cond fails.
	Txn(ctx context.Context, conds []Cond, ops []Op) error
	// Close releases the store (and any lock it holds).
	Close() error
}

// RevisionTxner is implemented by stores that can tell the version Txn gave
// the keys it wrote, so that a caller may keep what it wrote and later
// compare-and-swap against it without reading it back.
type RevisionTxner interface {
	// TxnRevision is Txn that also returns the Version every put key now
	// has, or 0 when the store cannot tell (the write still happened).
	TxnRevision(ctx context.Context, conds []Cond, ops []Op) (int64, error)
}

// TxnRevision runs a transaction on s and returns the written keys' new
// version when s can tell, else 0.
func TxnRevision(ctx context.Context, s Store, conds []Cond, ops []Op) (int64, error) {
	if r, ok := s.(RevisionTxner); ok {
		return r.TxnRevision(ctx, conds, ops)
	}
	return 0, s.Txn(ctx, conds, ops)
}

// PrefixGetter is implemented by stores that can read some keys and every
// key under a prefix in one consistent read, so that a caller needs one
// request (one round trip to a server) for an object kept as a prefix of
// keys and the keys it reads with it.
type PrefixGetter interface {
	// GetWithPrefix returns what Get(keys...) and List(prefix) would,
	// both read at one revision: no write falls between the two.
	GetWithPrefix(ctx context.Context, keys []string, prefix string) (entries, under []KeyValue, err error)
}
