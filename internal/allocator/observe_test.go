package allocator_test

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/storetest"
)

func observeOne(t *testing.T, a *allocator.Allocator, id string) allocator.Observed {
	t.Helper()
	all, err := a.ObserveHandles(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range all {
		if o.Handle.ID == id {
			return o
		}
	}
	t.Fatalf("handle %s not observed", id)
	return allocator.Observed{}
}

// TestReleaseObserved: a guarded release frees what was observed —
// borrowed parts included — and never an allocation made again under
// the same ID after the observation.
func TestReleaseObserved(t *testing.T) {
	small := ipam.Pool{Name: "small", CIDR: netip.MustParsePrefix("10.8.0.0/27"), BlockSize: 28}
	storeBackends(t, func(t *testing.T, s store.Store) {
		a := newAllocator(t, s, small, v6Pool)
		ctx := t.Context()
		for _, node := range []string{"node-a", "node-b"} {
			if _, err := a.Allocate(ctx, podRequest(node, node, "small")); err != nil {
				t.Fatal(err)
			}
		}
		// node-c's dual-stack handle: IPv6 in its own block, IPv4 borrowed.
		h, err := a.Allocate(ctx, podRequest("node-c", "c", "small", "v6"))
		if err != nil {
			t.Fatal(err)
		}
		o := observeOne(t, a, h.ID)
		if len(o.Parts) != 2 || !slices.Equal(sortedAddrs(o.Handle.IPs), sortedAddrs(h.IPs)) {
			t.Fatalf("observed %+v, want both parts of %+v", o, h)
		}
		freed, err := a.ReleaseObserved(ctx, o)
		if err != nil || len(freed) != 2 {
			t.Fatalf("ReleaseObserved = %v, %v", freed, err)
		}
		if l := loans(t, s); len(l) != 0 {
			t.Fatalf("loans after the release: %q", l)
		}
		// Observed, then released and allocated again under the same ID:
		// the observation is stale and the new allocation stays.
		h1, err := a.Allocate(ctx, podRequest("node-a", "again", "v6"))
		if err != nil {
			t.Fatal(err)
		}
		stale := observeOne(t, a, h1.ID)
		if _, err := a.Release(ctx, "node-a", h1.ID); err != nil {
			t.Fatal(err)
		}
		h2, err := a.Allocate(ctx, podRequest("node-a", "again", "v6"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.ReleaseObserved(ctx, stale); !errors.Is(err, allocator.ErrHandleChanged) {
			t.Fatalf("ReleaseObserved of a reallocated handle = %v, want ErrHandleChanged", err)
		}
		if got := storetest.Holders(t, s)[h2.IPs[0].Addr]; got != h2.ID {
			t.Fatalf("the new allocation %s is held by %q", h2.IPs[0].Addr, got)
		}
	})
}

func sortedAddrs(ips []ipam.HandleIP) []netip.Addr {
	var out []netip.Addr
	for _, ip := range ips {
		out = append(out, ip.Addr)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// TestTakeOver: on a full pool the new sandbox of a pod takes its
// old sandbox's address over in one write; a stale observation, another
// pod and a request the old addresses do not satisfy are refused.
func TestTakeOver(t *testing.T) {
	tiny := ipam.Pool{Name: "tiny", CIDR: netip.MustParsePrefix("10.5.0.0/30"), BlockSize: 30}
	storeBackends(t, func(t *testing.T, s store.Store) {
		a := newAllocator(t, s, tiny, v6Pool)
		ctx := t.Context()
		sandbox := func(container string) allocator.Request {
			r := podRequest("node-a", container, "tiny")
			r.Handle.PodUID, r.Handle.Pod = "uid-web", "web"
			r.Handle.NetNS = "/var/run/netns/" + container
			return r
		}
		old, err := a.Allocate(ctx, sandbox("old"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Allocate(ctx, podRequest("node-a", "other", "tiny")); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Allocate(ctx, sandbox("new")); !errors.Is(err, allocator.ErrExhausted) {
			t.Fatalf("ADD on the full pool = %v", err)
		}
		cands, err := a.TakeoverCandidates(ctx, sandbox("new").Handle)
		if err != nil || len(cands) != 1 || cands[0].Handle.ID != old.ID {
			t.Fatalf("candidates = %+v, %v; want the old sandbox", cands, err)
		}
		if _, err := a.TakeOver(ctx, podRequest("node-a", "stranger", "tiny"), cands[0]); !errors.Is(err, allocator.ErrTakeoverRefused) {
			t.Fatalf("another pod taking over = %v", err)
		}
		dual := sandbox("new")
		dual.Sets = append(dual.Sets, []string{"v6"})
		if _, err := a.TakeOver(ctx, dual, cands[0]); !errors.Is(err, allocator.ErrTakeoverRefused) {
			t.Fatalf("a request the old addresses do not satisfy = %v", err)
		}
		h, err := a.TakeOver(ctx, sandbox("new"), cands[0])
		if err != nil || h.IPs[0].Addr != old.IPs[0].Addr {
			t.Fatalf("TakeOver = %+v, %v; want %s", h, err, old.IPs[0].Addr)
		}
		if got := storetest.Holders(t, s)[old.IPs[0].Addr]; got != h.ID {
			t.Fatalf("%s held by %q after the takeover", old.IPs[0].Addr, got)
		}
		if _, err := a.TakeOver(ctx, sandbox("newer"), cands[0]); !errors.Is(err, allocator.ErrHandleChanged) {
			t.Fatalf("a second takeover of the same observation = %v, want ErrHandleChanged", err)
		}
		if again, err := a.Allocate(ctx, sandbox("new")); err != nil || again.IPs[0].Addr != h.IPs[0].Addr {
			t.Fatalf("ADD of the new sandbox after the takeover = %+v, %v", again, err)
		}
	})
}

func TestFreeNodeBlocks(t *testing.T) {
	storeBackends(t, func(t *testing.T, s store.Store) {
		a := newAllocator(t, s, v4Pool, v6Pool)
		ctx := t.Context()
		keep, err := a.Allocate(ctx, podRequest("gone", "keep", "v4"))
		if err != nil {
			t.Fatal(err)
		}
		drop, err := a.Allocate(ctx, podRequest("gone", "drop", "v6"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Release(ctx, "gone", drop.ID); err != nil {
			t.Fatal(err)
		}
		// A claim the node's object never got (an ADD that stopped).
		orphan := store.Claim{BlockRef: store.BlockRef{Pool: "v6", CIDR: v6Pool.BlockAt(9)}, Node: "gone"}
		if _, err := s.CreateClaim(ctx, orphan); err != nil {
			t.Fatal(err)
		}
		out, err := a.FreeNodeBlocks(ctx, "gone")
		if err != nil {
			t.Fatal(err)
		}
		want := allocator.NodeCleanup{
			Freed:   []allocator.NodeBlock{{Pool: "v6", Block: drop.IPs[0].Block}},
			Dropped: []allocator.NodeBlock{{Pool: "v6", Block: orphan.CIDR}},
			Kept:    []allocator.NodeBlock{{Pool: "v4", Block: keep.IPs[0].Block}},
		}
		if !slices.Equal(out.Freed, want.Freed) || !slices.Equal(out.Dropped, want.Dropped) || !slices.Equal(out.Kept, want.Kept) {
			t.Fatalf("FreeNodeBlocks = %+v, want %+v", out, want)
		}
		claims, err := s.ListClaims(ctx, store.ClaimSelector{Node: "gone"})
		if err != nil || len(claims) != 1 || claims[0].CIDR != keep.IPs[0].Block {
			t.Fatalf("claims left = %+v, %v; want the kept block's", claims, err)
		}
		if _, err := a.Release(ctx, "gone", keep.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := a.FreeNodeBlocks(ctx, "gone"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetNode(ctx, "gone"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the gone node's empty object remains: %v", err)
		}
		if nodes, err := a.AffineNodes(ctx); err != nil || len(nodes) != 0 {
			t.Fatalf("AffineNodes = %v, %v", nodes, err)
		}
	})
}

// TestObserveLoanOnly: an ADD killed after writing its loan but
// before the lender's record leaves a handle only a loan names; it is
// observed (holding nothing) and released by ReleaseObserved and by
// ReleaseHandles, so GC and the controller clean it up.
func TestObserveLoanOnly(t *testing.T) {
	small := ipam.Pool{Name: "small", CIDR: netip.MustParsePrefix("10.8.0.0/27"), BlockSize: 28}
	storeBackends(t, func(t *testing.T, s store.Store) {
		a := newAllocator(t, s, small)
		ctx := t.Context()
		for _, node := range []string{"node-a", "node-b"} {
			if _, err := a.Allocate(ctx, podRequest(node, node, "small")); err != nil {
				t.Fatal(err)
			}
		}
		for _, release := range []string{"observed", "handles"} {
			req := podRequest("node-c", "half-"+release, "small")
			c := &crashing{Store: s, crash: 2} // the loan is written, the lender's record is not
			if _, err := allocator.New(c, nil).Allocate(ctx, req); !errors.Is(err, errCrash) {
				t.Fatalf("killed ADD = %v", err)
			}
			if l := loans(t, s); len(l) != 1 {
				t.Fatalf("loans after the killed ADD = %q, want one", l)
			}
			o := observeOne(t, a, req.Handle.ID)
			if len(o.Parts) != 0 || len(o.Handle.IPs) != 0 || o.Handle.Node != "node-c" {
				t.Fatalf("observed the loan-only handle as %+v", o)
			}
			if release == "observed" {
				if _, err := a.ReleaseObserved(ctx, o); err != nil {
					t.Fatal(err)
				}
			} else if _, err := a.ReleaseHandles(ctx, func(h ipam.Handle) bool { return h.ID == req.Handle.ID }); err != nil {
				t.Fatal(err)
			}
			if l := loans(t, s); len(l) != 0 {
				t.Fatalf("loans after releasing the loan-only handle (%s) = %q", release, l)
			}
		}
	})
}
