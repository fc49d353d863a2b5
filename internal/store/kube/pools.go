package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// poolSpec validates p and returns its spec (store.MarshalPool) after the
// size checks (of the pool, and of its blocks: MaxBlockAddrs); nothing is
// sent when they fail.
func poolSpec(p store.Pool) ([]byte, error) {
	spec, err := store.MarshalPool(p)
	if err != nil {
		return nil, err
	}
	if host := p.Spec.CIDR.Addr().BitLen() - p.Spec.BlockSize; host >= 0 && host < 63 && 1<<host > MaxBlockAddrs {
		return nil, fmt.Errorf("%w: pool %q: blocks of /%d hold %d addresses; on the Kubernetes datastore a block's state (one IPAMBlock of at most %d bytes) holds the records of at most %d addresses: use a block size of /%d or longer",
			store.ErrInvalid, p.Spec.Name, p.Spec.BlockSize, 1<<host, MaxObjectBytes, MaxBlockAddrs, p.Spec.CIDR.Addr().BitLen()-bitsOf(MaxBlockAddrs))
	}
	if err := (store.Limits{MaxObjectBytes: MaxObjectBytes}).Fits("pool "+p.Spec.Name, len(spec)); err != nil {
		return nil, err
	}
	return spec, nil
}

// decodePool checks a pool object against the name it was read by (the
// spec's, for lists) and decodes it.
func (s *Store) decodePool(o *object, name string) (store.Pool, error) {
	if want := s.names.object(name); o.Metadata.Name != want {
		return store.Pool{}, fmt.Errorf("%w: %s holds pool %q, whose object name is %q", store.ErrCorrupt, what(kindPool, o.Metadata.Name), name, want)
	}
	p, err := store.UnmarshalPool(name, o.Spec)
	if err != nil {
		return store.Pool{}, fmt.Errorf("%s: %w", what(kindPool, o.Metadata.Name), err)
	}
	p.Version = store.Version(o.Metadata.ResourceVersion)
	return p, nil
}

// GetPool GETs the pool's IPAMPool and LISTs its IPAMReservations.
func (s *Store) GetPool(ctx context.Context, name string) (store.Pool, error) {
	return s.getPool(ctx, name, false)
}

// GetPoolCached is GetPool answered from the API server's watch cache,
// which may lag behind the latest write: for readers that tolerate a
// stale pool (an allocation's view of its pools, checked again after a
// claim).
func (s *Store) GetPoolCached(ctx context.Context, name string) (store.Pool, error) {
	return s.getPool(ctx, name, true)
}

func (s *Store) getPool(ctx context.Context, name string, cached bool) (store.Pool, error) {
	if err := store.ValidName("pool", name); err != nil {
		return store.Pool{}, err
	}
	o, err := s.getAt(ctx, kindPool, s.names.object(name), cached)
	if err != nil {
		return store.Pool{}, err
	}
	p, err := s.decodePool(o, name)
	if err != nil {
		return store.Pool{}, err
	}
	ps := []store.Pool{p}
	if err := s.withReserved(ctx, name, ps); err != nil {
		return store.Pool{}, err
	}
	return ps[0], nil
}

// ListPools LISTs the partition's IPAMPools, sorted by name.
func (s *Store) ListPools(ctx context.Context) ([]store.Pool, error) {
	objs, err := s.list(ctx, kindPool, s.selector())
	if err != nil {
		return nil, err
	}
	var out []store.Pool
	for i := range objs {
		var named struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(objs[i].Spec, &named); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", store.ErrCorrupt, what(kindPool, objs[i].Metadata.Name), err)
		}
		p, err := s.decodePool(&objs[i], named.Name)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b store.Pool) int { return strings.Compare(a.Spec.Name, b.Spec.Name) })
	if len(out) > 0 {
		if err := s.withReserved(ctx, "", out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// CreatePool POSTs a new IPAMPool.
func (s *Store) CreatePool(ctx context.Context, p store.Pool) (store.Pool, error) {
	spec, err := poolSpec(p)
	if err != nil {
		return store.Pool{}, err
	}
	name := s.names.object(p.Spec.Name)
	body, err := s.newObject(kindPool, name, nil, spec, "")
	if err != nil {
		return store.Pool{}, err
	}
	v, err := s.create(ctx, kindPool, name, body)
	if err != nil {
		return store.Pool{}, err
	}
	p.Version = v
	return p, nil
}

// UpdatePool PUTs the IPAMPool at p.Version.
func (s *Store) UpdatePool(ctx context.Context, p store.Pool) (store.Pool, error) {
	spec, err := poolSpec(p)
	if err != nil {
		return store.Pool{}, err
	}
	name := s.names.object(p.Spec.Name)
	if p.Version == "" {
		return store.Pool{}, s.noVersion(ctx, kindPool, name)
	}
	body, err := s.newObject(kindPool, name, nil, spec, p.Version)
	if err != nil {
		return store.Pool{}, err
	}
	v, err := s.update(ctx, kindPool, name, body)
	if err != nil {
		return store.Pool{}, err
	}
	p.Version = v
	return p, nil
}

// DeletePool DELETEs the IPAMPool with a resourceVersion precondition,
// then the pool's IPAMReservations.
func (s *Store) DeletePool(ctx context.Context, p store.Pool) error {
	if err := store.ValidName("pool", p.Spec.Name); err != nil {
		return err
	}
	name := s.names.object(p.Spec.Name)
	if p.Version == "" {
		return s.noVersion(ctx, kindPool, name)
	}
	if err := s.del(ctx, kindPool, name, p.Version); err != nil {
		return err
	}
	rs, err := s.listReservations(ctx, p.Spec.Name, false)
	if errors.Is(err, ErrNoCRD) {
		return nil
	}
	for _, r := range rs {
		if err := s.DeleteReservation(ctx, r); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("pool %q is deleted, its reservations not all: %w", p.Spec.Name, err)
		}
	}
	if err != nil {
		return fmt.Errorf("pool %q is deleted, its reservations not: %w", p.Spec.Name, err)
	}
	return nil
}

// bitsOf returns log2 of a power of two.
func bitsOf(n int) int {
	b := 0
	for n > 1 {
		n >>= 1
		b++
	}
	return b
}

// Selector is the label selector of this partition's objects, as its
// lists send it: what a watch of its IPAMPools or IPAMReservations selects.
func (s *Store) Selector() string { return s.selector() }

// DecodePool decodes an IPAMPool of this partition as the API server
// serves it (JSON), as ListPools does, without its reservations; the
// version is the object's resourceVersion.
func (s *Store) DecodePool(raw []byte) (store.Pool, error) {
	o, err := decodeObject(kindPool, "", raw)
	if err != nil {
		return store.Pool{}, err
	}
	if err := s.checkPartition(kindPool, o); err != nil {
		return store.Pool{}, err
	}
	var named struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(o.Spec, &named); err != nil {
		return store.Pool{}, fmt.Errorf("%w: %s: %v", store.ErrCorrupt, what(kindPool, o.Metadata.Name), err)
	}
	return s.decodePool(o, named.Name)
}
