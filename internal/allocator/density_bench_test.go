package allocator_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked/kvbackedtest"
)

// BenchmarkAllocateDensity measures one allocator's dual-stack ADD and the
// DEL after it on the local file, on a node already holding 10 to 2 000
// dual-stack pods: the allocator's own work per ADD (its copy of the node,
// the write's diff and checks) on top of the store's.
//
//	go test -run '^$' -bench AllocateDensity -benchtime 300x ./internal/allocator/
func BenchmarkAllocateDensity(b *testing.B) {
	for _, pods := range []int{10, 2000} {
		b.Run(fmt.Sprintf("pods=%d", pods), func(b *testing.B) {
			ctx := context.Background()
			s := kvbacked.New(kvbackedtest.OpenLocalKV(b))
			defer s.Close()
			a := allocator.New(s, nil)
			for _, p := range []ipam.Pool{
				{Name: "v4", CIDR: netip.MustParsePrefix("10.8.0.0/16"), BlockSize: 26},
				{Name: "v6", CIDR: netip.MustParsePrefix("fd00:8::/112"), BlockSize: 122},
			} {
				if _, err := a.EnsurePool(ctx, p); err != nil {
					b.Fatal(err)
				}
			}
			for i := range pods {
				if _, err := a.Allocate(ctx, podRequest("node-a", fmt.Sprintf("resident-%d", i), "v4", "v6")); err != nil {
					b.Fatal(err)
				}
			}
			i := 0
			for b.Loop() {
				id := fmt.Sprintf("bench-%d", i)
				i++
				h, err := a.Allocate(ctx, podRequest("node-a", id, "v4", "v6"))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := a.Release(ctx, "node-a", h.ID); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
