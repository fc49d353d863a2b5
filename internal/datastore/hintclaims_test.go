package datastore

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/allocator/allocatortest"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
)

// claimsV4 has few blocks, claimed in address order: node-b's ADDs, made
// first, claim the block below node-a's, which an allocation from a
// forged node-a object then tries first.
var claimsV4 = ipam.Pool{Name: "claims4", CIDR: netip.MustParsePrefix("10.23.0.0/24"), BlockSize: 28}

// stealSetup makes node-b hold two addresses of the first block of
// claimsV4 and node-a one of the next (leaving node-a's hint file), and
// returns node-b's block, its claim and a shared store (closed by the
// test's end).
func stealSetup(t *testing.T, h *hintTest) (store.BlockRef, store.Claim, store.Store) {
	t.Helper()
	h.v4 = claimsV4
	h.add("node-b", "b0")
	h.add("node-b", "b1")
	h.add("node-a", "a0")
	s, err := Open(t.Context(), h.ds, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ref := store.BlockRef{Pool: claimsV4.Name, CIDR: claimsV4.BlockAt(0)}
	c, err := s.GetClaim(t.Context(), ref)
	if err != nil || c.Node != "node-b" {
		t.Fatalf("claim of %s: %+v, %v; want node-b's", ref, c, err)
	}
	return ref, c, s
}

// TestHintedADDRefusesForgedObject: node-a's object rewritten through
// the store with node-b's block in it (node-b's held address first in its
// free queue) after node-a's hint was left: the hinted ADD's write
// conflicts, the object it then reads is refused naming the block and
// its claimant, and neither object changes.
func TestHintedADDRefusesForgedObject(t *testing.T) {
	h := newHintTest(t)
	ref, _, s := stealSetup(t, h)
	victim, err := s.GetNode(t.Context(), "node-b")
	if err != nil {
		t.Fatal(err)
	}
	forged, stolen := allocatortest.Steal(t, s, "node-a", "node-b", ref)
	got, w, err := h.tryAdd("node-a", "a1")
	if !w.Unread {
		t.Fatalf("the ADD did not take the hint: %+v", w)
	}
	if !errors.Is(err, allocator.ErrBlockNotClaimed) || !strings.Contains(err.Error(), ref.String()) || !strings.Contains(err.Error(), `"node-b"`) {
		t.Fatalf("ADD on the forged object = %v, %v; want %v naming %s and node-b (node-b's %s is the stolen address)",
			got.IPs, err, allocator.ErrBlockNotClaimed, ref, stolen)
	}
	for _, want := range []store.Node{victim, forged} {
		n, err := s.GetNode(t.Context(), want.Name)
		if err != nil || n.Version != want.Version {
			t.Fatalf("node object %s: version %q, %v; want %q unchanged", want.Name, n.Version, err, want.Version)
		}
	}
}

// TestForgedHintCostsAConflict: a hint file edited (as root on the node
// can) into a node object holding node-b's block, node-b's held address
// first — naming node-b's claim among the node's, or not — never makes
// the ADD hand out that address: the hinted write requires every claim
// the hint names to be the node's (a conflict: the ADD forgets the hint
// and reads), and a block the hint names no claim of is checked against
// the node's claims. The ADD gets an address of node-a's own block and
// node-b's object does not change.
func TestForgedHintCostsAConflict(t *testing.T) {
	for _, naming := range []bool{true, false} {
		name := "without its claim"
		if naming {
			name = "naming its claim"
		}
		t.Run(name, func(t *testing.T) {
			h := newHintTest(t)
			ref, claim, s := stealSetup(t, h)
			victim, err := s.GetNode(t.Context(), "node-b")
			if err != nil {
				t.Fatal(err)
			}
			path := h.path("node-a")
			hint := loadHint(path, "node-a")
			if hint == nil || len(hint.Claims) == 0 {
				t.Fatalf("node-a's hint %+v; want one naming its claims", hint)
			}
			own, err := store.UnmarshalNode("node-a", hint.Value)
			if err != nil {
				t.Fatal(err)
			}
			forged, stolen := allocatortest.WithStolenBlock(own, allocatortest.VictimBlock(t, s, "node-b", ref))
			if hint.Value, err = store.MarshalNode(forged); err != nil {
				t.Fatal(err)
			}
			if naming {
				hint.Claims = append(hint.Claims, kvbacked.ClaimHint{Ref: ref, Version: claim.Version})
			}
			saveHint(path, *hint)
			got, w, err := h.tryAdd("node-a", "a1")
			if err != nil {
				t.Fatal(err)
			}
			if !w.Unread {
				t.Fatalf("the ADD did not take the forged hint: %+v", w)
			}
			if got.IPs[0].Addr == stolen || ref.CIDR.Contains(got.IPs[0].Addr) {
				t.Fatalf("ADD on the forged hint got %s, in node-b's block %s", got.IPs[0].Addr, ref)
			}
			now, err := s.GetNode(t.Context(), "node-b")
			if err != nil || now.Version != victim.Version || !reflect.DeepEqual(now.Handles, victim.Handles) {
				t.Fatalf("node-b's object changed: %+v, %v", now, err)
			}
			a, err := s.GetNode(t.Context(), "node-a")
			if err != nil {
				t.Fatal(err)
			}
			if _, held := a.Block(ref); held {
				t.Fatalf("node-a's stored object holds node-b's block %s", ref)
			}
			h.want("b0", "b1", "a0", "a1")
		})
	}
}

// TestHintClaimsReadWithMarker: a hint that lacks a pool the config names
// is used for the node object alone, and the claims it names are read
// with the marker and the pools (one Get): the ADD needs no list of the
// node's claims. A hinted claim that is not the node's any more is not
// taken.
func TestHintClaimsReadWithMarker(t *testing.T) {
	h := newHintTest(t)
	h.add("node-b", "b0")
	h.add("node-a", "c0")
	h.add("node-a", "c1")
	shared, err := Open(t.Context(), h.ds, Options{})
	if err != nil {
		t.Fatal(err)
	}
	others, err := shared.ListClaims(t.Context(), store.ClaimSelector{Node: "node-b"})
	_ = shared.Close()
	if err != nil || len(others) == 0 {
		t.Fatalf("node-b's claims: %v, %v", others, err)
	}
	hint := loadHint(h.path("node-a"), "node-a")
	if hint == nil || len(hint.Claims) != 2 || len(hint.Pools) != 2 {
		t.Fatalf("hint %+v; want node-a's two claims and the two pools", hint)
	}
	kvs, err := openKV(t.Context(), h.ds)
	if err != nil {
		t.Fatal(err)
	}
	defer kvs.Close()
	c := &kvCounter{Store: kvs}
	partial := *hint
	partial.Pools = partial.Pools[:1]
	// node-b's claim, and a claim of a block nobody holds.
	partial.Claims = append(partial.Claims, kvbacked.ClaimHint{Ref: others[0].BlockRef, Version: others[0].Version},
		kvbacked.ClaimHint{Ref: store.BlockRef{Pool: osV4.Name, CIDR: osV4.BlockAt(7)}, Version: hint.Claims[0].Version})
	s, warmed, err := openTyped(t.Context(), c, Warm{Node: "node-a", Pools: []string{osV4.Name, osV6.Name}, Hint: &partial})
	if err != nil {
		t.Fatal(err)
	}
	if !warmed.Hinted || len(warmed.Claims) != 2 {
		t.Fatalf("warmed from a hint of one pool: hinted %v, claims %v; want node-a's two claims", warmed.Hinted, warmed.Claims)
	}
	a := allocator.New(s, nil)
	a.Remember(warmed.Node, warmed.Pools, warmed.Claims...)
	if _, err := a.Allocate(t.Context(), hintReq("node-a", "c2")); err != nil {
		t.Fatal(err)
	}
	if got := c.counts(); got != [3]int{1, 0, 1} {
		t.Fatalf("ADD with a hint of one pool: %d gets, %d lists, %d transactions; want the open's get and one transaction", got[0], got[1], got[2])
	}
	h.want("b0", "c0", "c1", "c2")
}
