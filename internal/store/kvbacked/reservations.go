package kvbacked

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// A pool's reservations are one value, reservations/<pool>
// (store.MarshalReservations), so that a read of the pool reads them in
// the same request (GetPool, ReadLayoutWarm). Every write of it puts the
// pool's key too, unchanged, in the same transaction guarded by both
// keys' versions: the pool's version then names its reservations as
// well, and a write guarded by a remembered pool version (TakeHint) fails
// once a reservation of the pool changed. A reservation's Version is the
// version of its pool's reservations value when it was read.

// poolAndReservations reads pool's key and its reservations key in one
// request: ErrNotFound when the pool is absent.
func (s *Store) poolAndReservations(ctx context.Context, pool string) (kv.KeyValue, kv.KeyValue, []store.Reservation, error) {
	what := fmt.Sprintf("reservations of pool %q", pool)
	if err := s.checkRead(ctx); err != nil {
		return kv.KeyValue{}, kv.KeyValue{}, nil, err
	}
	es, err := s.kv.Get(ctx, poolKey(pool), reservationsKey(pool))
	if err != nil {
		return kv.KeyValue{}, kv.KeyValue{}, nil, mapErr(what, err)
	}
	if es[0].Version == 0 {
		return kv.KeyValue{}, kv.KeyValue{}, nil, fmt.Errorf("%w: pool %q", store.ErrNotFound, pool)
	}
	var rs []store.Reservation
	if es[1].Version != 0 {
		if rs, err = store.UnmarshalReservations(pool, es[1].Value); err != nil {
			return kv.KeyValue{}, kv.KeyValue{}, nil, err
		}
		for i := range rs {
			rs[i].Version = version(es[1].Version)
		}
	}
	return es[0], es[1], rs, nil
}

// writeReservations puts pool's reservations rs and its key, unchanged,
// guarded by both as read.
func (s *Store) writeReservations(ctx context.Context, what string, pool, res kv.KeyValue, rs []store.Reservation) (int64, error) {
	val, err := store.MarshalReservations(rs)
	if err != nil {
		return 0, err
	}
	if err := s.Limits().Fits(what, len(val)); err != nil {
		return 0, err
	}
	ops := []kv.Op{{Key: pool.Key, Value: pool.Value}, {Key: res.Key, Value: val}}
	if len(rs) == 0 {
		ops[1] = kv.Op{Key: res.Key, Delete: true}
	}
	rev, err := s.txn(ctx, what, []kv.Cond{{Key: pool.Key, Version: pool.Version}, {Key: res.Key, Version: res.Version}}, ops)
	if err != nil {
		s.observePool(strings.TrimPrefix(pool.Key, poolPrefix), nil, nil, "")
		if failedCond(err) {
			return 0, fmt.Errorf("%w: %s: the pool or its reservations changed meanwhile", store.ErrConflict, what)
		}
		return 0, mapErr(what, err)
	}
	if len(rs) == 0 {
		val = nil
	}
	s.observePool(strings.TrimPrefix(pool.Key, poolPrefix), pool.Value, val, stored(rev))
	return rev, nil
}

// CreateReservation implements store.Store.
func (s *Store) CreateReservation(ctx context.Context, r store.Reservation) (store.Reservation, error) {
	if r.Created.IsZero() {
		r.Created = time.Now()
	}
	spec, err := store.EncodeReservation(r)
	if err != nil {
		return store.Reservation{}, err
	}
	r.Created = spec.Created
	what := fmt.Sprintf("create reservation %s", r.Ref())
	pk, rk, rs, err := s.poolAndReservations(ctx, r.Pool)
	if err != nil {
		return store.Reservation{}, err
	}
	p, err := decodePool(pk)
	if err != nil {
		return store.Reservation{}, err
	}
	if err := store.ReservationFits(p.Spec, r); err != nil {
		return store.Reservation{}, err
	}
	if slices.ContainsFunc(rs, func(o store.Reservation) bool { return o.CIDR == r.CIDR }) {
		return store.Reservation{}, fmt.Errorf("%w: %s", store.ErrExists, what)
	}
	rev, err := s.writeReservations(ctx, what, pk, rk, append(rs, r))
	if err != nil {
		return store.Reservation{}, err
	}
	r.Version = stored(rev)
	return r, nil
}

// ListReservations implements store.Store.
func (s *Store) ListReservations(ctx context.Context, sel store.ReservationSelector) ([]store.Reservation, error) {
	var es []kv.KeyValue
	if sel.Pool != "" {
		if err := store.ValidName("pool", sel.Pool); err != nil {
			return nil, err
		}
		if err := s.checkRead(ctx); err != nil {
			return nil, err
		}
		got, err := s.kv.Get(ctx, reservationsKey(sel.Pool))
		if err != nil {
			return nil, mapErr("list reservations", err)
		}
		es = got
	} else {
		got, err := s.list(ctx, "list reservations", reservationPrefix)
		if err != nil {
			return nil, err
		}
		es = got
	}
	var out []store.Reservation
	for _, e := range es {
		if e.Version == 0 {
			continue
		}
		rs, err := store.UnmarshalReservations(strings.TrimPrefix(e.Key, reservationPrefix), e.Value)
		if err != nil {
			return nil, err
		}
		for _, r := range rs {
			r.Version = version(e.Version)
			out = append(out, r)
		}
	}
	return store.SortReservations(out), nil
}

// DeleteReservation implements store.Store. A reservation is never
// updated: the delete removes the reservation of r's pool and CIDR when
// it is the one r was read as (same creation time), even when
// others of the pool changed since; ErrConflict when that name was
// reserved again meanwhile, ErrNotFound when it is gone.
func (s *Store) DeleteReservation(ctx context.Context, r store.Reservation) error {
	if _, err := store.EncodeReservation(r); err != nil {
		return err
	}
	what := fmt.Sprintf("delete reservation %s", r.Ref())
	pk, rk, rs, err := s.poolAndReservations(ctx, r.Pool)
	if err != nil {
		return fmt.Errorf("%w: %s", store.ErrNotFound, what)
	}
	i := slices.IndexFunc(rs, func(o store.Reservation) bool { return o.CIDR == r.CIDR })
	if i < 0 {
		return fmt.Errorf("%w: %s", store.ErrNotFound, what)
	}
	if !rs[i].Created.Equal(r.Created.UTC().Truncate(time.Second)) {
		return fmt.Errorf("%w: %s: reserved again since version %q", store.ErrConflict, what, r.Version)
	}
	_, err = s.writeReservations(ctx, what, pk, rk, slices.Delete(rs, i, i+1))
	return err
}
