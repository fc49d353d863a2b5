package kvbacked

import (
	"context"
	"fmt"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// GetPool implements store.Store: the pool and its reservations key in
// one read.
func (s *Store) GetPool(ctx context.Context, name string) (store.Pool, error) {
	if err := store.ValidName("pool", name); err != nil {
		return store.Pool{}, err
	}
	what := fmt.Sprintf("pool %q", name)
	if err := s.checkRead(ctx); err != nil {
		return store.Pool{}, err
	}
	es, err := s.kv.Get(ctx, poolKey(name), reservationsKey(name))
	if err != nil {
		s.observePool(name, nil, nil, "")
		return store.Pool{}, mapErr(what, err)
	}
	if es[0].Version == 0 {
		s.observePool(name, nil, nil, "")
		return store.Pool{}, fmt.Errorf("%w: %s", store.ErrNotFound, what)
	}
	p, err := decodePoolWith(es[0], es[1])
	if err == nil {
		s.observePool(name, es[0].Value, es[1].Value, p.Version)
	}
	return p, err
}

func decodePool(e kv.KeyValue) (store.Pool, error) {
	p, err := store.UnmarshalPool(strings.TrimPrefix(e.Key, poolPrefix), e.Value)
	if err != nil {
		return store.Pool{}, err
	}
	p.Version = version(e.Version)
	return p, nil
}

// decodePoolWith decodes a pool and its reservations key (r.Version 0:
// none), which fills p.Spec.Reserved.
func decodePoolWith(e, r kv.KeyValue) (store.Pool, error) {
	p, err := decodePool(e)
	if err != nil || r.Version == 0 {
		return p, err
	}
	rs, err := store.UnmarshalReservations(p.Spec.Name, r.Value)
	if err != nil {
		return store.Pool{}, err
	}
	p.Spec.Reserved = store.ReservedPrefixes(p.Spec.Name, rs)
	return p, nil
}

// ListPools implements store.Store: every pool, sorted by name, with its
// reservations.
func (s *Store) ListPools(ctx context.Context) ([]store.Pool, error) {
	es, err := s.list(ctx, "list pools", poolPrefix)
	if err != nil {
		return nil, err
	}
	rs, err := s.list(ctx, "list reservations", reservationPrefix)
	if err != nil {
		return nil, err
	}
	reserved := map[string]kv.KeyValue{}
	for _, r := range rs {
		reserved[strings.TrimPrefix(r.Key, reservationPrefix)] = r
	}
	var out []store.Pool
	for _, e := range es {
		p, err := decodePoolWith(e, reserved[strings.TrimPrefix(e.Key, poolPrefix)])
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// encodePool validates p and returns its key and value.
func (s *Store) encodePool(p store.Pool) (string, []byte, error) {
	val, err := store.MarshalPool(p)
	if err != nil {
		return "", nil, err
	}
	if err := s.Limits().Fits(fmt.Sprintf("pool %q", p.Spec.Name), len(val)); err != nil {
		return "", nil, err
	}
	return poolKey(p.Spec.Name), val, nil
}

// CreatePool implements store.Store.
func (s *Store) CreatePool(ctx context.Context, p store.Pool) (store.Pool, error) {
	key, val, err := s.encodePool(p)
	if err != nil {
		return store.Pool{}, err
	}
	what := fmt.Sprintf("create pool %q", p.Spec.Name)
	// A new pool has no reservations: the delete drops any left by a
	// pool of that name removed by an earlier version.
	rev, err := s.txn(ctx, what, []kv.Cond{{Key: key}}, []kv.Op{{Key: key, Value: val}, {Key: reservationsKey(p.Spec.Name), Delete: true}})
	if err != nil {
		s.observePool(p.Spec.Name, nil, nil, "")
		return store.Pool{}, createErr(what, err)
	}
	p.Version = stored(rev)
	p.Spec.Reserved = nil
	s.observePool(p.Spec.Name, val, nil, p.Version)
	return p, nil
}

// UpdatePool implements store.Store.
func (s *Store) UpdatePool(ctx context.Context, p store.Pool) (store.Pool, error) {
	key, val, err := s.encodePool(p)
	if err != nil {
		return store.Pool{}, err
	}
	what := fmt.Sprintf("update pool %q at version %q", p.Spec.Name, p.Version)
	v, ok := parseVersion(p.Version)
	if !ok {
		return store.Pool{}, s.casErr(ctx, what, key, nil)
	}
	rev, err := s.txn(ctx, what, []kv.Cond{{Key: key, Version: v}}, []kv.Op{{Key: key, Value: val}})
	if err != nil {
		s.observePool(p.Spec.Name, nil, nil, "")
		return store.Pool{}, s.casErr(ctx, what, key, err)
	}
	from := p.Version
	p.Version = stored(rev)
	s.observePoolUpdate(p.Spec.Name, val, from, p.Version)
	return p, nil
}

// DeletePool implements store.Store.
func (s *Store) DeletePool(ctx context.Context, p store.Pool) error {
	if err := store.ValidName("pool", p.Spec.Name); err != nil {
		return err
	}
	key := poolKey(p.Spec.Name)
	what := fmt.Sprintf("delete pool %q at version %q", p.Spec.Name, p.Version)
	v, ok := parseVersion(p.Version)
	if !ok {
		return s.casErr(ctx, what, key, nil)
	}
	// The pool's reservations go with it.
	_, err := s.txn(ctx, what, []kv.Cond{{Key: key, Version: v}}, []kv.Op{{Key: key, Delete: true}, {Key: reservationsKey(p.Spec.Name), Delete: true}})
	s.observePool(p.Spec.Name, nil, nil, "")
	if err != nil {
		return s.casErr(ctx, what, key, err)
	}
	return nil
}
