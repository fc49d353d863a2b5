package allocator_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/storetest"
)

// observedIDs picks the handles ids out of a snapshot, in that order.
func observedIDs(t *testing.T, snap allocator.Snapshot, ids ...string) []allocator.Observed {
	t.Helper()
	var out []allocator.Observed
	for _, id := range ids {
		found := false
		for _, o := range snap.Handles {
			if o.Handle.ID == id {
				out = append(out, o)
				found = true
			}
		}
		if !found {
			t.Fatalf("handle %s not observed", id)
		}
	}
	return out
}

// TestReleaseObservedAll: a node's observed handles are released in
// one write of its object with no read (the object Observe read);
// a handle changed since the observation stays, also when the remembered
// object is stale; a handle with a borrowed part is released whole.
func TestReleaseObservedAll(t *testing.T) {
	small := ipam.Pool{Name: "small", CIDR: netip.MustParsePrefix("10.8.0.0/27"), BlockSize: 28}
	storeBackends(t, func(t *testing.T, s store.Store) {
		c := &counted{Store: s}
		a := newAllocator(t, c, small, v6Pool)
		other := allocator.New(s, nil) // another process
		ctx := t.Context()
		alloc := func(al *allocator.Allocator, node, id string, pools ...string) ipam.Handle {
			t.Helper()
			h, err := al.Allocate(ctx, podRequest(node, id, pools...))
			if err != nil {
				t.Fatal(err)
			}
			return h
		}
		for _, node := range []string{"node-a", "node-b"} {
			alloc(a, node, node, "small") // the two small blocks
		}
		ids := func(hs ...ipam.Handle) []string {
			var out []string
			for _, h := range hs {
				out = append(out, h.ID)
			}
			return out
		}

		// Fresh observation: three leaks of node-e (allocated by another
		// process, so only Observe's read tells a of its object),
		// one write, no read.
		b1, b2, b3 := alloc(other, "node-e", "b1", "v6"), alloc(other, "node-e", "b2", "v6"), alloc(other, "node-e", "b3", "v6")
		snap, err := a.Observe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		reads, writes := c.reads.Load(), c.writes.Load()
		res := a.ReleaseObservedAll(ctx, observedIDs(t, snap, ids(b1, b2, b3)...))
		for i, r := range res {
			if r.Err != nil || len(r.Freed) != 1 {
				t.Fatalf("outcome %d = %+v, want one address freed", i, r)
			}
		}
		if r, w := c.reads.Load()-reads, c.writes.Load()-writes; r != 0 || w != 1 {
			t.Fatalf("releasing three handles of one node took %d reads and %d writes, want 0 and 1", r, w)
		}

		// Stale observation: a2 released and allocated again under the
		// same ID by another process after the observation, so the
		// remembered object of node-a is stale too.
		a1, a2 := alloc(a, "node-a", "a1", "v6"), alloc(a, "node-a", "a2", "v6")
		cc := alloc(a, "node-c", "c", "small", "v6") // IPv4 borrowed
		snap, err = a.Observe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		obs := observedIDs(t, snap, ids(a1, a2, cc)...)
		if len(obs[2].Parts) != 2 {
			t.Fatalf("node-c's handle has parts %+v, want its own and a lender's", obs[2].Parts)
		}
		if _, err := other.Release(ctx, "node-a", a2.ID); err != nil {
			t.Fatal(err)
		}
		again := alloc(other, "node-a", "a2", "v6")
		res = a.ReleaseObservedAll(ctx, obs)
		if res[0].Err != nil || len(res[0].Freed) != 1 || res[0].Freed[0] != a1.IPs[0].Addr {
			t.Errorf("a1: %+v, want %s freed", res[0], a1.IPs[0].Addr)
		}
		if !errors.Is(res[1].Err, allocator.ErrHandleChanged) || len(res[1].Freed) != 0 {
			t.Errorf("a2, allocated again since observed: %+v, want ErrHandleChanged", res[1])
		}
		if res[2].Err != nil || len(res[2].Freed) != 2 {
			t.Errorf("c: %+v, want both addresses freed", res[2])
		}
		holders := storetest.Holders(t, s)
		if got := holders[again.IPs[0].Addr]; got != again.ID {
			t.Fatalf("the new allocation %s is held by %q", again.IPs[0].Addr, got)
		}
		for _, h := range []ipam.Handle{a1, cc, b1, b2, b3} {
			for _, ip := range h.IPs {
				if got, held := holders[ip.Addr]; held && (got != again.ID || ip.Addr != again.IPs[0].Addr) {
					t.Errorf("%s of released %s still held by %q", ip.Addr, h.ID, got)
				}
			}
		}
		if l := loans(t, s); len(l) != 0 {
			t.Fatalf("loans after the release: %q", l)
		}

		// Remembered object older than the observation: node-d's object
		// as a's own ADD left it, then another process's ADD, observed by
		// ObserveHandles (which remembers nothing). The handle is not
		// taken for released: the verdict comes from a read.
		alloc(a, "node-d", "d1", "v6")
		d2 := alloc(other, "node-d", "d2", "v6")
		res = a.ReleaseObservedAll(ctx, []allocator.Observed{observeOne(t, a, d2.ID)})
		if res[0].Err != nil || len(res[0].Freed) != 1 {
			t.Fatalf("d2, observed after the remembered object: %+v, want its address freed", res[0])
		}
	})
}
