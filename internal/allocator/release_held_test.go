package allocator_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

func TestReleaseAddrHeldBy(t *testing.T) {
	for _, p := range []ipam.Pool{
		{Name: "v4", CIDR: prefix("10.1.0.0/24"), BlockSize: 26},
		{Name: "v6", CIDR: prefix("fd01::/120"), BlockSize: 122},
	} {
		t.Run(p.Name, func(t *testing.T) {
			ctx := context.Background()
			a, _ := setup(t, p)
			h1 := allocate(t, a, "n1", "net.c1.eth0", set(p.Name))
			ip := h1.IPs[0].Addr
			if _, err := a.ReleaseAddrHeldBy(ctx, p.Name, ip, "net.other.eth0"); !errors.Is(err, allocator.ErrHolderChanged) {
				t.Fatalf("release held by another: %v, want ErrHolderChanged", err)
			}
			got, err := a.ReleaseAddrHeldBy(ctx, p.Name, ip, "net.c1.eth0")
			if err != nil || got.ID != "net.c1.eth0" {
				t.Fatalf("release: %+v, %v", got, err)
			}
			if _, ok, _ := a.Handle(ctx, "net.c1.eth0"); ok {
				t.Error("handle left after its only address was released")
			}
			if _, err := a.ReleaseAddrHeldBy(ctx, p.Name, ip, "net.c1.eth0"); !errors.Is(err, allocator.ErrNotAllocated) {
				t.Fatalf("second release: %v, want ErrNotAllocated", err)
			}
		})
	}
}
