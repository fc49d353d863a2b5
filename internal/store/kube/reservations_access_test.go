package kube

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// TestReservationAccess: with the RBAC deploy/ ships, the node's and the
// controller's ServiceAccounts read reservations (a read of a pool
// carries them) and can neither create nor delete one; the admin can.
func TestReservationAccess(t *testing.T) {
	ctx := ctxT(t)
	for _, who := range []struct {
		name string
		open func(t testing.TB) *Store
	}{
		{"ipkeeper-node", func(t testing.TB) *Store { return openAsNode(t, "node-a") }},
		{"ipkeeper-controller", openStore},
	} {
		t.Run(who.name, func(t *testing.T) {
			sa := who.open(t)
			admin := openAdmin(t, sa.Prefix())
			if _, err := admin.CreatePool(ctx, store.Pool{Spec: pool4}); err != nil {
				t.Fatal(err)
			}
			r, err := admin.CreateReservation(ctx, store.Reservation{Pool: pool4.Name, CIDR: netip.MustParsePrefix("10.0.0.7/32"), Note: "router"})
			if err != nil {
				t.Fatalf("CreateReservation as the admin: %v", err)
			}
			p, err := sa.GetPool(ctx, pool4.Name)
			if err != nil || !slices.Equal(p.Spec.Reserved, []netip.Prefix{r.CIDR}) {
				t.Fatalf("GetPool as %s = %v, %v: want Reserved [%s]", who.name, p.Spec.Reserved, err, r.CIDR)
			}
			if rs, err := sa.ListReservations(ctx, store.ReservationSelector{}); err != nil || len(rs) != 1 {
				t.Fatalf("ListReservations as %s = %+v, %v", who.name, rs, err)
			}
			_, err = sa.CreateReservation(ctx, store.Reservation{Pool: pool4.Name, CIDR: netip.MustParsePrefix("10.0.0.8/32")})
			if !errors.Is(err, store.ErrDenied) {
				t.Errorf("CreateReservation as %s: %v, want ErrDenied", who.name, err)
			}
			if err := sa.DeleteReservation(ctx, r); !errors.Is(err, store.ErrDenied) {
				t.Errorf("DeleteReservation as %s: %v, want ErrDenied", who.name, err)
			}
			if rs, _ := admin.ListReservations(ctx, store.ReservationSelector{}); len(rs) != 1 || rs[0].CIDR != r.CIDR {
				t.Fatalf("refused writes changed the reservations: %+v", rs)
			}
			if err := admin.DeleteReservation(ctx, r); err != nil {
				t.Fatalf("DeleteReservation as the admin: %v", err)
			}
		})
	}
}
