package allocator_test

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// oneBlock6 is an IPv6 pool of one block: once node-b claims it, every
// other node borrows its IPv6 addresses from node-b.
var oneBlock6 = ipam.Pool{Name: "v6one", CIDR: netip.MustParsePrefix("fd00:7::/124"), BlockSize: 124}

// splitSticky parks the dual-stack sticky handle of db/pg-0 whose IPv4
// address is in node-a's block and whose IPv6 address is borrowed from
// node-b's, and returns its addresses.
func splitSticky(t *testing.T, a *allocator.Allocator) []netip.Addr {
	t.Helper()
	ctx := t.Context()
	if _, err := a.Allocate(ctx, podRequest("node-b", "b6", oneBlock6.Name)); err != nil {
		t.Fatal(err)
	}
	h, err := a.AllocateSticky(ctx, stickyRequest("node-a", "c1", v4Pool.Name, oneBlock6.Name))
	if err != nil {
		t.Fatal(err)
	}
	holders, err := a.StickyHolders(ctx, h.Sticky, "net", "eth0")
	if err != nil || len(holders) != 1 || len(holders[0].Parts) != 2 {
		t.Fatalf("holders of a dual-stack handle with a borrowed family: %+v, %v; want one in two objects", holders, err)
	}
	if _, parked, err := a.ReleaseOrPark(ctx, "node-a", h.ID); err != nil || !parked {
		t.Fatalf("DEL: parked %v, %v", parked, err)
	}
	return addrsOf(h)
}

func addrsOf(h ipam.Handle) []netip.Addr {
	var out []netip.Addr
	for _, ip := range h.IPs {
		out = append(out, ip.Addr)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// wantMoved checks that h is on node with addrs, stored live, and that
// the store is clean with no loan but those of h.
func wantMoved(t *testing.T, s store.Store, a *allocator.Allocator, h ipam.Handle, node string, addrs []netip.Addr) {
	t.Helper()
	if h.Node != node || !slices.Equal(addrsOf(h), addrs) {
		t.Fatalf("%s on %s: %v, want %v on %s", h.ID, h.Node, h.IPs, addrs, node)
	}
	back, found, err := a.Handle(t.Context(), node, h.ID)
	if err != nil || !found || back.IsParked() || !slices.Equal(addrsOf(back), addrs) {
		t.Fatalf("stored: %+v %v %v", back, found, err)
	}
	checkClean(t, s)
	for _, l := range loans(t, s) {
		if l != node+":"+h.ID+"->node-a" && l != node+":"+h.ID+"->node-b" {
			t.Errorf("loan %s left", l)
		}
	}
}

// TestStickySplitMoves: a parked dual-stack reservation whose IPv6
// address is borrowed from another node's block moves whole to a third
// node (two loans, two renames), and home to the node of its IPv4 block;
// the old node's loan goes with it.
func TestStickySplitMoves(t *testing.T) {
	storeBackends(t, func(t *testing.T, s store.Store) {
		ctx := t.Context()
		a := newAllocator(t, s, v4Pool, oneBlock6)
		want := splitSticky(t, a)
		h, err := a.AllocateSticky(ctx, stickyRequest("node-c", "c2", v4Pool.Name, oneBlock6.Name))
		if err != nil {
			t.Fatal(err)
		}
		wantMoved(t, s, a, h, "node-c", want)
		if _, parked, err := a.ReleaseOrPark(ctx, "node-c", h.ID); err != nil || !parked {
			t.Fatalf("DEL on node-c: parked %v, %v", parked, err)
		}
		h, err = a.AllocateSticky(ctx, stickyRequest("node-a", "c3", v4Pool.Name, oneBlock6.Name))
		if err != nil {
			t.Fatal(err)
		}
		wantMoved(t, s, a, h, "node-a", want)
	})
}

// TestStickySplitResumes: a move of a split reservation that stops after
// renaming its first record (the second object's write fails) leaves the
// new handle with one address and the reservation with the other; the
// ADD's retry completes the move, and so does, after the failed ADD's
// DEL parks the half it got, the identity's next ADD (both halves
// gathered). Never a second holder, no address lost.
func TestStickySplitResumes(t *testing.T) {
	for _, after := range []string{"retry", "del"} {
		t.Run(after, func(t *testing.T) {
			storeBackends(t, func(t *testing.T, s store.Store) {
				ctx := t.Context()
				cs := &counted{Store: s}
				a := newAllocator(t, cs, v4Pool, oneBlock6)
				want := splitSticky(t, a)
				renamed := false
				cs.failWrite = func(kind string, n store.Node) error {
					if kind != "update" || !slices.ContainsFunc(n.Handles, func(r ipam.Handle) bool { return r.ID == ipam.HandleID("net", "c2", "eth0") }) {
						return nil
					}
					if renamed {
						return errInjected
					}
					renamed = true
					return nil
				}
				req := stickyRequest("node-c", "c2", v4Pool.Name, oneBlock6.Name)
				if _, err := a.AllocateSticky(ctx, req); !errors.Is(err, errInjected) {
					t.Fatalf("move with its second rename failing: %v, want the injected failure", err)
				}
				cs.failWrite = nil
				holders, err := a.StickyHolders(ctx, req.Handle.Sticky, "net", "eth0")
				if err != nil || len(holders) != 2 {
					t.Fatalf("after the stopped move: %+v, %v; want the new handle and the old reservation", holders, err)
				}
				next := req
				if after == "del" {
					if _, parked, err := a.ReleaseOrPark(ctx, "node-c", req.Handle.ID); err != nil || !parked {
						t.Fatalf("DEL of the failed ADD: parked %v, %v", parked, err)
					}
					next = stickyRequest("node-c", "c3", v4Pool.Name, oneBlock6.Name)
				}
				h, err := a.AllocateSticky(ctx, next)
				if err != nil {
					t.Fatal(err)
				}
				wantMoved(t, s, a, h, "node-c", want)
				if holders, err := a.StickyHolders(ctx, req.Handle.Sticky, "net", "eth0"); err != nil || len(holders) != 1 {
					t.Fatalf("holders after: %+v, %v; want one", holders, err)
				}
			})
		})
	}
}

// TestStickyDelRacesPark: a DEL whose park meets the record parked by
// the controller meanwhile (its write conflicts, the record is no longer
// as it observed it) looks again and succeeds: the handle is parked.
func TestStickyDelRacesPark(t *testing.T) {
	storeBackends(t, func(t *testing.T, s store.Store) {
		ctx := t.Context()
		cs := &counted{Store: s}
		a := newAllocator(t, cs, v4Pool)
		h, err := a.AllocateSticky(ctx, stickyRequest("node-a", "c1", v4Pool.Name))
		if err != nil {
			t.Fatal(err)
		}
		ctrl := allocator.New(s, nil)
		raced := false
		cs.failWrite = func(kind string, n store.Node) error {
			if raced || kind != "update" {
				return nil
			}
			raced = true
			hs, err := ctrl.StickyHolders(ctx, h.Sticky, "net", "eth0")
			if err != nil || len(hs) != 1 {
				t.Errorf("controller's look: %+v %v", hs, err)
				return nil
			}
			if err := ctrl.ParkObserved(ctx, hs[0], hs[0].Handle.Created.Add(time.Hour)); err != nil {
				t.Errorf("controller's park: %v", err)
			}
			return nil
		}
		got, parked, err := a.ReleaseOrPark(ctx, "node-a", h.ID)
		if err != nil || !parked || !raced {
			t.Fatalf("DEL racing the controller's park: %v parked=%v raced=%v %v", got, parked, raced, err)
		}
		back, found, err := a.Handle(ctx, "node-a", h.ID)
		if err != nil || !found || !back.IsParked() {
			t.Fatalf("after: %+v %v %v", back, found, err)
		}
		checkClean(t, s)
	})
}
