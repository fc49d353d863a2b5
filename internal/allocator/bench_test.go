package allocator_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// BenchmarkAllocateRelease measures one Allocate and one Release (two
// durable transactions) against a local bbolt store, with 50 other
// handles holding addresses in the node's blocks.
func BenchmarkAllocateRelease(b *testing.B) {
	p4 := ipam.Pool{Name: "b4", CIDR: prefix("10.8.0.0/16"), BlockSize: 26, Gateway: addr("10.8.0.1")}
	p6 := ipam.Pool{Name: "b6", CIDR: prefix("fd08::/64"), BlockSize: 122}
	for _, bc := range []struct {
		name string
		sets [][]string
	}{
		{"v4", [][]string{set("b4")}},
		{"v6", [][]string{set("b6")}},
		{"dual-stack", [][]string{set("b4"), set("b6")}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			a, _ := setup(b, p4, p6)
			ctx := context.Background()
			for i := range 50 {
				allocate(b, a, "node-a", fmt.Sprintf("resident-%d", i), bc.sets...)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				id := fmt.Sprintf("bench-%d", i)
				i++
				if _, err := a.Allocate(ctx, request("node-a", id, bc.sets...)); err != nil {
					b.Fatal(err)
				}
				if _, err := a.Release(ctx, id); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
