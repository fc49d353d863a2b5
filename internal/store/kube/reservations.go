package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// ResourceReservations is the resource (plural name) of IPAMReservation.
const ResourceReservations = "ipamreservations"

// kindReservation is a reservation (store.Reservation): one object per
// pool and CIDR, named as a claim of that CIDR would be, labelled with
// its pool, its spec store.ReservationSpec. Reservations are never
// updated, only created and deleted. A read of a pool LISTs its
// reservations (by the pool label) to fill ipam.Pool.Reserved.
var kindReservation = kind{ResourceReservations, "IPAMReservation"}

// decodeReservation decodes a reservation object and checks it against
// its name.
func (s *Store) decodeReservation(o *object) (store.Reservation, error) {
	var spec store.ReservationSpec
	if err := json.Unmarshal(o.Spec, &spec); err != nil {
		return store.Reservation{}, fmt.Errorf("%w: %s: %v", store.ErrCorrupt, what(kindReservation, o.Metadata.Name), err)
	}
	r, err := store.DecodeReservation("", spec)
	if err != nil {
		return store.Reservation{}, fmt.Errorf("%s: %w", what(kindReservation, o.Metadata.Name), err)
	}
	if name := s.names.claim(r.Pool, r.CIDR); name != o.Metadata.Name {
		return store.Reservation{}, fmt.Errorf("%w: %s holds the reservation %s, whose object name is %q", store.ErrCorrupt, what(kindReservation, o.Metadata.Name), r.Ref(), name)
	}
	r.Version = store.Version(o.Metadata.ResourceVersion)
	return r, nil
}

// CreateReservation POSTs an IPAMReservation, after a GET of its pool
// (which must exist and hold the CIDR).
func (s *Store) CreateReservation(ctx context.Context, r store.Reservation) (store.Reservation, error) {
	if r.Created.IsZero() {
		r.Created = time.Now()
	}
	spec, err := store.EncodeReservation(r)
	if err != nil {
		return store.Reservation{}, err
	}
	r.Created = spec.Created
	p, err := s.getPool(ctx, r.Pool, false)
	if err != nil {
		return store.Reservation{}, err
	}
	if err := store.ReservationFits(p.Spec, r); err != nil {
		return store.Reservation{}, err
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return store.Reservation{}, err
	}
	name := s.names.claim(r.Pool, r.CIDR)
	body, err := s.newObject(kindReservation, name, map[string]string{LabelPool: labelValue(r.Pool)}, raw, "")
	if err != nil {
		return store.Reservation{}, err
	}
	v, err := s.create(ctx, kindReservation, name, body)
	if err != nil {
		return store.Reservation{}, fmt.Errorf("reservation %s: %w", r.Ref(), err)
	}
	r.Version = v
	return r, nil
}

// ListReservations LISTs the IPAMReservations (of one pool, by its
// label) and keeps those whose spec matches.
func (s *Store) ListReservations(ctx context.Context, sel store.ReservationSelector) ([]store.Reservation, error) {
	return s.listReservations(ctx, sel.Pool, false)
}

func (s *Store) listReservations(ctx context.Context, pool string, cached bool) ([]store.Reservation, error) {
	var reqs []string
	if pool != "" {
		if err := store.ValidName("pool", pool); err != nil {
			return nil, err
		}
		reqs = append(reqs, LabelPool+"="+labelValue(pool))
	}
	objs, err := s.listAt(ctx, kindReservation, s.selector(reqs...), cached)
	if err != nil {
		return nil, err
	}
	var out []store.Reservation
	for i := range objs {
		r, err := s.decodeReservation(&objs[i])
		if err != nil {
			return nil, err
		}
		if pool == "" || r.Pool == pool {
			out = append(out, r)
		}
	}
	return store.SortReservations(out), nil
}

// DeleteReservation DELETEs the IPAMReservation at r.Version.
func (s *Store) DeleteReservation(ctx context.Context, r store.Reservation) error {
	if _, err := store.EncodeReservation(r); err != nil {
		return err
	}
	name := s.names.claim(r.Pool, r.CIDR)
	if r.Version == "" {
		return s.noVersion(ctx, kindReservation, name)
	}
	return s.del(ctx, kindReservation, name, r.Version)
}

// withReserved fills the Reserved of pools from their reservations, read
// up to date also for a pool read from the watch cache (GetPoolCached):
// a reservation applies from the next allocation on, and reservations
// change rarely. An API server without the IPAMReservation resource (CRDs
// of an earlier version) has none.
func (s *Store) withReserved(ctx context.Context, pool string, pools []store.Pool) error {
	rs, err := s.listReservations(ctx, pool, false)
	if errors.Is(err, ErrNoCRD) {
		return nil
	}
	if err != nil {
		return err
	}
	for i := range pools {
		pools[i].Spec.Reserved = store.ReservedPrefixes(pools[i].Spec.Name, rs)
	}
	return nil
}

// DecodeReservation decodes an IPAMReservation of this partition as the
// API server serves it (JSON).
func (s *Store) DecodeReservation(raw []byte) (store.Reservation, error) {
	o, err := decodeObject(kindReservation, "", raw)
	if err != nil {
		return store.Reservation{}, err
	}
	if err := s.checkPartition(kindReservation, o); err != nil {
		return store.Reservation{}, err
	}
	return s.decodeReservation(o)
}
