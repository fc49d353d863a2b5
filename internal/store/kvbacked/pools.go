package kvbacked

import (
	"context"
	"fmt"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// GetPool implements store.Store.
func (s *Store) GetPool(ctx context.Context, name string) (store.Pool, error) {
	if err := store.ValidName("pool", name); err != nil {
		return store.Pool{}, err
	}
	e, err := s.get(ctx, fmt.Sprintf("pool %q", name), poolKey(name))
	if err != nil {
		s.observePool(name, nil, "")
		return store.Pool{}, err
	}
	p, err := decodePool(e)
	if err == nil {
		s.observePool(name, e.Value, p.Version)
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

// ListPools implements store.Store: every pool, sorted by name.
func (s *Store) ListPools(ctx context.Context) ([]store.Pool, error) {
	es, err := s.list(ctx, "list pools", poolPrefix)
	if err != nil {
		return nil, err
	}
	var out []store.Pool
	for _, e := range es {
		p, err := decodePool(e)
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
	rev, err := s.txn(ctx, what, []kv.Cond{{Key: key}}, []kv.Op{{Key: key, Value: val}})
	if err != nil {
		s.observePool(p.Spec.Name, nil, "")
		return store.Pool{}, createErr(what, err)
	}
	p.Version = stored(rev)
	s.observePool(p.Spec.Name, val, p.Version)
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
		s.observePool(p.Spec.Name, nil, "")
		return store.Pool{}, s.casErr(ctx, what, key, err)
	}
	p.Version = stored(rev)
	s.observePool(p.Spec.Name, val, p.Version)
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
	_, err := s.txn(ctx, what, []kv.Cond{{Key: key, Version: v}}, []kv.Op{{Key: key, Delete: true}})
	s.observePool(p.Spec.Name, nil, "")
	if err != nil {
		return s.casErr(ctx, what, key, err)
	}
	return nil
}
