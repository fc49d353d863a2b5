package store

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// Reservation keeps an address, or a CIDR, of one pool from being handed
// out: every allocation that reads the pool after the reservation is
// stored skips it (ipam.Pool.Reserved, which the backends fill from the
// pool's reservations when they read the pool). A reservation is named by
// its pool and CIDR (an address is its /32 or /128); two reservations of
// one pool may overlap. Addresses held when it is made stay with their
// holders (WhenFree says the admin asked for that); once released they
// are not handed out again while it exists.
type Reservation struct {
	// Pool is the pool the CIDR is in (inside its CIDR).
	Pool string
	// CIDR is the reserved range, masked.
	CIDR netip.Prefix
	// Note says why, for people (at most MaxReservationNote bytes).
	Note string
	// WhenFree: made while addresses in it were held, taking effect
	// for each as it is released.
	WhenFree bool
	// Created is when it was made.
	Created time.Time
	// Version is the stored state's version.
	Version Version
}

// MaxReservationNote bounds a reservation's note, in bytes.
const MaxReservationNote = 1024

// Ref is the reservation's name: its pool and CIDR.
func (r Reservation) Ref() BlockRef { return BlockRef{Pool: r.Pool, CIDR: r.CIDR} }

// ReservationSelector chooses reservations to list: those of one pool, or
// (the zero selector) all.
type ReservationSelector struct {
	Pool string
}

// ReservationSpec is the stored form of a reservation.
type ReservationSpec struct {
	Pool     string       `json:"pool"`
	CIDR     netip.Prefix `json:"cidr"`
	Note     string       `json:"note,omitempty"`
	WhenFree bool         `json:"whenFree,omitempty"`
	Created  time.Time    `json:"created"`
}

// EncodeReservation validates r and returns its stored form, or an error
// wrapping ErrInvalid.
func EncodeReservation(r Reservation) (ReservationSpec, error) {
	if err := ValidName("pool", r.Pool); err != nil {
		return ReservationSpec{}, err
	}
	if !r.CIDR.IsValid() || r.CIDR != r.CIDR.Masked() || r.CIDR.Addr().Is4In6() || r.CIDR.Addr().Zone() != "" {
		return ReservationSpec{}, fmt.Errorf("%w: reservation of pool %q: %s is not a masked IPv4 or IPv6 prefix", ErrInvalid, r.Pool, r.CIDR)
	}
	if len(r.Note) > MaxReservationNote || !utf8.ValidString(r.Note) || strings.ContainsFunc(r.Note, func(c rune) bool { return c < 0x20 && c != '\t' }) {
		return ReservationSpec{}, fmt.Errorf("%w: reservation %s: the note must be UTF-8 text of at most %d bytes without control characters", ErrInvalid, r.Ref(), MaxReservationNote)
	}
	return ReservationSpec{Pool: r.Pool, CIDR: r.CIDR, Note: r.Note, WhenFree: r.WhenFree, Created: r.Created.UTC().Truncate(time.Second)}, nil
}

// DecodeReservation checks a stored reservation; pool, when not "", is the
// pool it is stored under, which it must name.
func DecodeReservation(pool string, spec ReservationSpec) (Reservation, error) {
	r := Reservation{Pool: spec.Pool, CIDR: spec.CIDR, Note: spec.Note, WhenFree: spec.WhenFree, Created: spec.Created}
	if pool != "" && r.Pool != pool {
		return Reservation{}, fmt.Errorf("%w: reservation of pool %q is stored under pool %q", ErrCorrupt, r.Pool, pool)
	}
	if _, err := EncodeReservation(r); err != nil {
		return Reservation{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return r, nil
}

// MarshalReservations returns the stored form of one pool's reservations
// (a JSON list, sorted by CIDR), as the local file and etcd keep them.
func MarshalReservations(rs []Reservation) ([]byte, error) {
	specs := make([]ReservationSpec, 0, len(rs))
	for _, r := range SortReservations(rs) {
		s, err := EncodeReservation(r)
		if err != nil {
			return nil, err
		}
		specs = append(specs, s)
	}
	return json.Marshal(specs)
}

// UnmarshalReservations decodes what MarshalReservations wrote for pool.
func UnmarshalReservations(pool string, data []byte) ([]Reservation, error) {
	var specs []ReservationSpec
	if err := json.Unmarshal(data, &specs); err != nil {
		return nil, fmt.Errorf("%w: reservations of pool %q: %v", ErrCorrupt, pool, err)
	}
	out := make([]Reservation, 0, len(specs))
	for _, s := range specs {
		r, err := DecodeReservation(pool, s)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// SortReservations returns rs sorted by pool, then CIDR.
func SortReservations(rs []Reservation) []Reservation {
	out := slices.Clone(rs)
	slices.SortFunc(out, func(a, b Reservation) int { return a.Ref().Compare(b.Ref()) })
	return out
}

// ReservedPrefixes returns the CIDRs of pool's reservations among rs, in
// order: what ipam.Pool.Reserved holds.
func ReservedPrefixes(pool string, rs []Reservation) []netip.Prefix {
	var out []netip.Prefix
	for _, r := range SortReservations(rs) {
		if r.Pool == pool {
			out = append(out, r.CIDR)
		}
	}
	return out
}

// ReservationFits checks that r lies inside pool p's CIDR, in its family.
func ReservationFits(p ipam.Pool, r Reservation) error {
	if r.CIDR.Addr().Is4() != p.CIDR.Addr().Is4() || r.CIDR.Bits() < p.CIDR.Bits() || !p.CIDR.Contains(r.CIDR.Addr()) {
		return fmt.Errorf("%w: reservation %s is not inside pool %q (%s)", ErrInvalid, r.CIDR, p.Name, p.CIDR)
	}
	return nil
}
