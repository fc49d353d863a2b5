package local

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/bbolt"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// headerLen is the size of the version header in front of every value.
const headerLen = 8

// Get returns one entry per key, in the order asked, from one consistent
// snapshot.
func (s *Store) Get(ctx context.Context, keys ...string) ([]kv.KeyValue, error) {
	if err := s.ctxErr(ctx, "get"); err != nil {
		return nil, err
	}
	for _, k := range keys {
		if err := validKey(k); err != nil {
			return nil, err
		}
	}
	var out []kv.KeyValue
	err := s.db.View(func(tx *bbolt.Tx) error {
		var err error
		out, err = getIn(tx.Bucket(bucketKV), keys)
		return err
	})
	if err != nil {
		return nil, s.wrap("get", err)
	}
	return out, nil
}

// List returns every entry whose key starts with prefix, sorted by key
// bytewise, from one consistent snapshot.
func (s *Store) List(ctx context.Context, prefix string) ([]kv.KeyValue, error) {
	if err := s.ctxErr(ctx, "list"); err != nil {
		return nil, err
	}
	var out []kv.KeyValue
	err := s.db.View(func(tx *bbolt.Tx) error {
		var err error
		out, err = listIn(tx.Bucket(bucketKV), prefix)
		return err
	})
	if err != nil {
		return nil, s.wrap("list", err)
	}
	return out, nil
}

var _ kv.PrefixGetter = (*Store)(nil)

// GetWithPrefix implements kv.PrefixGetter: Get and List in one bbolt
// read transaction.
func (s *Store) GetWithPrefix(ctx context.Context, keys []string, prefix string) (entries, under []kv.KeyValue, err error) {
	if err := s.ctxErr(ctx, "get"); err != nil {
		return nil, nil, err
	}
	for _, k := range keys {
		if err := validKey(k); err != nil {
			return nil, nil, err
		}
	}
	err = s.db.View(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketKV)
		var err error
		if entries, err = getIn(b, keys); err != nil {
			return err
		}
		under, err = listIn(b, prefix)
		return err
	})
	if err != nil {
		return nil, nil, s.wrap("get", err)
	}
	return entries, under, nil
}

// getIn reads keys from b, one entry per key.
func getIn(b *bbolt.Bucket, keys []string) ([]kv.KeyValue, error) {
	out := make([]kv.KeyValue, len(keys))
	for i, k := range keys {
		e, err := decode(k, b.Get([]byte(k)))
		if err != nil {
			return nil, err
		}
		out[i] = e
	}
	return out, nil
}

// listIn reads every entry of b under prefix, in key order.
func listIn(b *bbolt.Bucket, prefix string) ([]kv.KeyValue, error) {
	var out []kv.KeyValue
	p := []byte(prefix)
	c := b.Cursor()
	for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
		e, err := decode(string(k), v)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// Txn applies ops if every cond holds, in one bbolt read-write transaction
// that is fsynced before Txn returns. All written keys get the next store
// revision as their version. A Txn without ops only checks conds and
// writes nothing.
func (s *Store) Txn(ctx context.Context, conds []kv.Cond, ops []kv.Op) error {
	_, err := s.TxnRevision(ctx, conds, ops)
	return err
}

// TxnRevision is Txn that returns the revision the written keys got (0
// when there were no ops).
func (s *Store) TxnRevision(ctx context.Context, conds []kv.Cond, ops []kv.Op) (int64, error) {
	if err := s.ctxErr(ctx, "txn"); err != nil {
		return 0, err
	}
	for _, c := range conds {
		if err := validKey(c.Key); err != nil {
			return 0, err
		}
	}
	for _, op := range ops {
		if err := validKey(op.Key); err != nil {
			return 0, err
		}
	}
	if len(ops) == 0 {
		err := s.db.View(func(tx *bbolt.Tx) error {
			return checkConds(tx.Bucket(bucketKV), conds)
		})
		return 0, s.wrap("txn", err)
	}
	var rev int64
	err := s.db.Update(func(tx *bbolt.Tx) error {
		// Waiting for bbolt's writer lock may have outlasted ctx.
		if err := ctx.Err(); err != nil {
			return err
		}
		b := tx.Bucket(bucketKV)
		if err := checkConds(b, conds); err != nil {
			return err
		}
		meta := tx.Bucket(bucketMeta)
		cur, err := revision(meta)
		if err != nil {
			return err
		}
		rev = cur + 1
		var hdr [headerLen]byte
		binary.BigEndian.PutUint64(hdr[:], uint64(rev))
		for _, op := range ops {
			if op.Delete {
				if err := b.Delete([]byte(op.Key)); err != nil {
					return err
				}
				continue
			}
			// bbolt keeps the slices until commit: give it fresh ones,
			// which also copies the caller's value.
			v := make([]byte, headerLen+len(op.Value))
			copy(v, hdr[:])
			copy(v[headerLen:], op.Value)
			if err := b.Put([]byte(op.Key), v); err != nil {
				return err
			}
		}
		return meta.Put(keyRev, bytes.Clone(hdr[:]))
	})
	if err != nil {
		return 0, s.wrap("txn", err)
	}
	return rev, nil
}

// checkConds returns an error wrapping store.ErrConflict for the first cond
// that does not hold.
func checkConds(b *bbolt.Bucket, conds []kv.Cond) error {
	for _, c := range conds {
		var have int64
		v := b.Get([]byte(c.Key))
		if v != nil {
			if len(v) < headerLen {
				return fmt.Errorf("%w: value of %q is %d bytes, shorter than its version header", ErrCorrupt, c.Key, len(v))
			}
			have = int64(binary.BigEndian.Uint64(v))
		}
		if have != c.Version {
			return fmt.Errorf("%w: %q is at version %d, want %d", store.ErrConflict, c.Key, have, c.Version)
		}
		if c.Value != nil && (v == nil || !bytes.Equal(v[headerLen:], c.Value)) {
			return fmt.Errorf("%w: %q does not hold the value the condition names", store.ErrConflict, c.Key)
		}
	}
	return nil
}

// revision returns the last committed revision (0 for a new store).
func revision(meta *bbolt.Bucket) (int64, error) {
	v := meta.Get(keyRev)
	if v == nil {
		return 0, nil
	}
	if len(v) != headerLen {
		return 0, fmt.Errorf("%w: revision is %d bytes, want %d", ErrCorrupt, len(v), headerLen)
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

// decode turns a stored value (nil for a missing key) into an entry whose
// Value is a copy, safe to use after the bbolt transaction ends.
func decode(key string, raw []byte) (kv.KeyValue, error) {
	if raw == nil {
		return kv.KeyValue{Key: key}, nil
	}
	if len(raw) < headerLen {
		return kv.KeyValue{}, fmt.Errorf("%w: value of %q is %d bytes, shorter than its version header", ErrCorrupt, key, len(raw))
	}
	return kv.KeyValue{
		Key:     key,
		Value:   bytes.Clone(raw[headerLen:]),
		Version: int64(binary.BigEndian.Uint64(raw)),
	}, nil
}

func validKey(k string) error {
	switch {
	case k == "":
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	case strings.IndexByte(k, 0) >= 0:
		return fmt.Errorf("%w: %q contains a NUL byte", ErrInvalidKey, k)
	case len(k) > bbolt.MaxKeySize:
		return fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidKey, len(k), bbolt.MaxKeySize)
	}
	return nil
}

// ctxErr reports a context that already ended, before any work is done.
func (s *Store) ctxErr(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("local: %s %s: %w: %w", op, s.path, store.ErrUnavailable, err)
	}
	return nil
}

// wrap adds context to an error from a bbolt transaction. Conflicts and
// corruption pass through; the context's end and failures of bbolt itself
// (closed store, I/O, full disk) wrap store.ErrUnavailable.
func (s *Store) wrap(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrConflict):
		return fmt.Errorf("local: %s: %w", op, err)
	case errors.Is(err, ErrCorrupt):
		return fmt.Errorf("local: %s %s: %w", op, s.path, err)
	default:
		return fmt.Errorf("local: %s %s: %w: %w", op, s.path, store.ErrUnavailable, err)
	}
}
