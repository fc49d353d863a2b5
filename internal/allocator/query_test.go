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

func TestReleaseAddrAndQueries(t *testing.T) {
	storeBackends(t, func(t *testing.T, s store.Store) {
		a := newAllocator(t, s, v4Pool, v6Pool)
		ctx := t.Context()
		h, err := a.Allocate(ctx, podRequest("node-a", "dual", "v4", "v6"))
		if err != nil {
			t.Fatal(err)
		}
		other, err := a.Allocate(ctx, podRequest("node-b", "other", "v4"))
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := a.Blocks(ctx, "")
		if err != nil || len(blocks) != 3 {
			t.Fatalf("Blocks = %d blocks, %v; want 3", len(blocks), err)
		}
		pool, b, err := a.Block(ctx, netip.PrefixFrom(h.IPs[1].Addr, 128))
		if err != nil || pool.Name != "v6" || b.Owner(h.IPs[1].Addr) != h.ID || b.Node != "node-a" {
			t.Fatalf("Block(%s) = %s, %+v, %v", h.IPs[1].Addr, pool.Name, b, err)
		}
		if _, err := a.ReleaseAddrHeldBy(ctx, "v4", h.IPs[0].Addr, other.ID); !errors.Is(err, allocator.ErrHolderChanged) {
			t.Fatalf("ReleaseAddrHeldBy with the wrong holder = %v", err)
		}
		// Releasing one address of a dual-stack handle keeps the other.
		got, err := a.ReleaseAddrHeldBy(ctx, "v4", h.IPs[0].Addr, h.ID)
		if err != nil || got.ID != h.ID {
			t.Fatalf("ReleaseAddrHeldBy = %+v, %v", got, err)
		}
		rest, ok, err := a.Handle(ctx, "node-a", h.ID)
		if err != nil || !ok || len(rest.IPs) != 1 || rest.IPs[0] != h.IPs[1] {
			t.Fatalf("handle after releasing its IPv4 address = %+v, %v, %v", rest, ok, err)
		}
		if _, err := a.ReleaseAddr(ctx, h.IPs[0].Addr); !errors.Is(err, allocator.ErrNotAllocated) {
			t.Fatalf("ReleaseAddr of a free address = %v", err)
		}
		if _, err := a.ReleaseAddr(ctx, h.IPs[1].Addr); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := a.Handle(ctx, "node-a", h.ID); ok {
			t.Fatal("a handle whose last address was released remains")
		}
		dropped, err := a.ReleaseHandles(ctx, func(x ipam.Handle) bool { return x.Node == "node-b" })
		if err != nil || len(dropped) != 1 || dropped[0].ID != other.ID {
			t.Fatalf("ReleaseHandles = %+v, %v", dropped, err)
		}
		if n := len(storetest.Holders(t, s)); n != 0 {
			t.Fatalf("%d addresses still held", n)
		}
	})
}
