package allocator_test

import (
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/storetest"
)

// TestReleaseRemembered: Release uses the node object the allocator
// last saw when it names the handle (no read: one write), but a copy that
// does not name it is confirmed by a read (another process allocated it
// since), and a copy whose record is stale conflicts and is read again:
// what is released is always the handle as stored.
func TestReleaseRemembered(t *testing.T) {
	storeBackends(t, func(t *testing.T, s store.Store) {
		c := &counted{Store: s}
		a := newAllocator(t, c, v4Pool)
		other := allocator.New(s, nil) // another process
		ctx := t.Context()
		if _, err := a.Allocate(ctx, podRequest("node-a", "x", "v4")); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Allocate(ctx, podRequest("node-a", "w", "v4")); err != nil {
			t.Fatal(err)
		}
		// Current copy naming the handle: one write, no read.
		r0, w0 := c.reads.Load(), c.writes.Load()
		if freed, err := a.Release(ctx, "node-a", podRequest("node-a", "w", "v4").Handle.ID); err != nil || len(freed) != 1 {
			t.Fatalf("Release(w) = %v, %v", freed, err)
		}
		if r, w := c.reads.Load()-r0, c.writes.Load()-w0; r != 0 || w != 1 {
			t.Fatalf("a release on the remembered object took %d reads and %d writes, want 0 and 1", r, w)
		}
		// Allocated by another process since: a's copy does not name it.
		y, err := other.Allocate(ctx, podRequest("node-a", "y", "v4"))
		if err != nil {
			t.Fatal(err)
		}
		if freed, err := a.Release(ctx, "node-a", y.ID); err != nil || len(freed) != 1 || freed[0] != y.IPs[0].Addr {
			t.Fatalf("Release of a handle a's copy does not name = %v, %v; want %s", freed, err, y.IPs[0].Addr)
		}
		// Released and allocated again by another process: a's copy of x
		// is stale.
		x := podRequest("node-a", "x", "v4").Handle.ID
		if _, err := other.Release(ctx, "node-a", x); err != nil {
			t.Fatal(err)
		}
		x2, err := other.Allocate(ctx, podRequest("node-a", "x", "v4"))
		if err != nil {
			t.Fatal(err)
		}
		if freed, err := a.Release(ctx, "node-a", x); err != nil || len(freed) != 1 || freed[0] != x2.IPs[0].Addr {
			t.Fatalf("Release of a handle a's copy holds stale = %v, %v; want %s", freed, err, x2.IPs[0].Addr)
		}
		if h := storetest.Holders(t, s); len(h) != 0 {
			t.Fatalf("still held after every release: %v", h)
		}
	})
}
