package storetest

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// testReservations: a reservation needs its pool and lies inside it; it
// round-trips exactly, names one reservation per pool and CIDR, is
// carried by every read of its pool (ipam.Pool.Reserved, so Permits
// refuses its addresses) until deleted, and goes with its pool.
func testReservations(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			addr := netip.PrefixFrom(f.pool.BlockAt(2).Addr().Next().Next(), f.pool.CIDR.Addr().BitLen())
			cidr := f.pool.BlockAt(5)
			at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
			one := store.Reservation{Pool: f.pool.Name, CIDR: addr, Note: "printer, ticket 42", Created: at}
			_, err := s.CreateReservation(ctx, one)
			wantNoConflict(t, err, store.ErrNotFound, "CreateReservation in a pool that does not exist")

			_, err = s.CreatePool(ctx, store.Pool{Spec: f.pool})
			noErr(t, err, "CreatePool")
			outside := one
			outside.CIDR = netip.MustParsePrefix("192.0.2.0/28")
			if f.pool.Is6() {
				outside.CIDR = netip.MustParsePrefix("2001:db8::/124")
			}
			_, err = s.CreateReservation(ctx, outside)
			wantErr(t, err, store.ErrInvalid, "CreateReservation outside its pool")
			bad := one
			bad.CIDR = netip.PrefixFrom(addr.Addr(), cidr.Bits())
			_, err = s.CreateReservation(ctx, bad)
			wantErr(t, err, store.ErrInvalid, "CreateReservation of a prefix with host bits")

			made, err := s.CreateReservation(ctx, one)
			noErr(t, err, "CreateReservation of an address")
			if made.Version == "" || !made.Created.Equal(at) {
				t.Fatalf("CreateReservation returned %+v: want a version and the creation time", made)
			}
			two := store.Reservation{Pool: f.pool.Name, CIDR: cidr, WhenFree: true, Created: at.Add(time.Hour)}
			_, err = s.CreateReservation(ctx, two)
			noErr(t, err, "CreateReservation of a CIDR")
			again := one
			again.Note = "another"
			_, err = s.CreateReservation(ctx, again)
			wantNoConflict(t, err, store.ErrExists, "CreateReservation of a reserved CIDR")

			rs, err := s.ListReservations(ctx, store.ReservationSelector{Pool: f.pool.Name})
			noErr(t, err, "ListReservations of the pool")
			if len(rs) != 2 || rs[0].CIDR != addr || rs[1].CIDR != cidr || rs[0].Note != one.Note || rs[0].WhenFree ||
				!rs[1].WhenFree || !rs[0].Created.Equal(at) || !rs[1].Created.Equal(two.Created) || rs[0].Version == "" {
				t.Fatalf("ListReservations = %+v, want %s (%q) then %s (when free), as made", rs, addr, one.Note, cidr)
			}
			all, err := s.ListReservations(ctx, store.ReservationSelector{})
			noErr(t, err, "ListReservations of all pools")
			if len(all) != 2 {
				t.Fatalf("ListReservations{} = %+v, want the 2 of pool %q", all, f.pool.Name)
			}
			other, err := s.ListReservations(ctx, store.ReservationSelector{Pool: f.pool.Name + "x"})
			noErr(t, err, "ListReservations of a pool without any")
			if len(other) != 0 {
				t.Fatalf("ListReservations of another pool = %+v", other)
			}

			p, err := s.GetPool(ctx, f.pool.Name)
			noErr(t, err, "GetPool")
			if !slices.Equal(p.Spec.Reserved, []netip.Prefix{addr, cidr}) || p.Spec.Permits(addr.Addr()) || p.Spec.Permits(cidr.Addr().Next()) {
				t.Fatalf("GetPool's Reserved = %v, want %s and %s, never permitted", p.Spec.Reserved, addr, cidr)
			}
			ps, err := s.ListPools(ctx)
			noErr(t, err, "ListPools")
			i := slices.IndexFunc(ps, func(q store.Pool) bool { return q.Spec.Name == f.pool.Name })
			if i < 0 || !slices.Equal(ps[i].Spec.Reserved, p.Spec.Reserved) {
				t.Fatalf("ListPools = %+v, want the pool with Reserved %v", ps, p.Spec.Reserved)
			}
			p.Spec.Disabled = true
			_, err = s.UpdatePool(ctx, p)
			noErr(t, err, "UpdatePool")
			if p, _ = s.GetPool(ctx, f.pool.Name); len(p.Spec.Reserved) != 2 {
				t.Fatalf("a pool update dropped its reservations: %v", p.Spec.Reserved)
			}

			gone := rs[0]
			noErr(t, s.DeleteReservation(ctx, gone), "DeleteReservation")
			wantNoConflict(t, s.DeleteReservation(ctx, gone), store.ErrNotFound, "DeleteReservation of a deleted reservation")
			p, err = s.GetPool(ctx, f.pool.Name)
			noErr(t, err, "GetPool after DeleteReservation")
			if !slices.Equal(p.Spec.Reserved, []netip.Prefix{cidr}) || !p.Spec.Permits(addr.Addr()) {
				t.Fatalf("after DeleteReservation the pool's Reserved = %v, want %s only", p.Spec.Reserved, cidr)
			}
			remade, err := s.CreateReservation(ctx, store.Reservation{Pool: f.pool.Name, CIDR: addr, Created: at.Add(2 * time.Hour)})
			noErr(t, err, "CreateReservation again")
			wantErr(t, s.DeleteReservation(ctx, gone), store.ErrConflict, "DeleteReservation of a reservation made again since")
			noErr(t, s.DeleteReservation(ctx, remade), "DeleteReservation of the one made again")

			// A reservation write may move its pool's version (the local
			// file and etcd write the pool's key with its reservations).
			p, err = s.GetPool(ctx, f.pool.Name)
			noErr(t, err, "GetPool before DeletePool")
			noErr(t, s.DeletePool(ctx, p), "DeletePool")
			_, err = s.CreatePool(ctx, store.Pool{Spec: f.pool})
			noErr(t, err, "CreatePool again")
			left, err := s.ListReservations(ctx, store.ReservationSelector{Pool: f.pool.Name})
			noErr(t, err, "ListReservations of the pool made again")
			if p, _ := s.GetPool(ctx, f.pool.Name); len(left) != 0 || len(p.Spec.Reserved) != 0 {
				t.Fatalf("a pool made again has its predecessor's reservations: %+v", left)
			}
		})
	}
}
