package ipam_test

import (
	"errors"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// TestBlockValidate: a block whose free queue and owners do not partition
// its ordinals (what a forged hint can hold: a held ordinal at the front of
// the free queue, ordinal 64 in a /26, -1, 2^40) is refused, for IPv4 and
// IPv6 blocks of 64 addresses; consistent blocks pass.
func TestBlockValidate(t *testing.T) {
	type c struct{ pool ipam.Pool }
	family(t,
		&c{ipam.Pool{Name: "p4", CIDR: prefix("10.1.0.0/24"), BlockSize: 26}},
		&c{ipam.Pool{Name: "p6", CIDR: prefix("fd01::/120"), BlockSize: 122}},
		func(t *testing.T, c c) {
			fresh := ipam.NewBlock(c.pool, c.pool.BlockAt(1), "n")
			used, _, err := fresh.Assign(c.pool, "h1")
			if err != nil {
				t.Fatal(err)
			}
			used, _, err = used.Assign(c.pool, "h2")
			if err != nil {
				t.Fatal(err)
			}
			for _, ok := range []ipam.Block{fresh, used} {
				if err := ok.Validate(); err != nil {
					t.Errorf("consistent block refused: %v", err)
				}
			}
			held := slices.Sorted(maps.Keys(used.Owners))[0]
			for _, tc := range []struct {
				name  string
				forge func(b *ipam.Block)
				want  string
			}{
				{"held ordinal at the queue front", func(b *ipam.Block) { b.Free = append([]int{held}, b.Free...); b.Free = b.Free[:len(b.Free)-1] }, "both free and allocated"},
				{"held ordinal moved to the queue, owner kept, queue too long", func(b *ipam.Block) { b.Free = append([]int{held}, b.Free...) }, "want 64 in all"},
				{"ordinal 64 in a 64-address block", func(b *ipam.Block) { b.Free[0] = 64 }, "outside"},
				{"ordinal -1", func(b *ipam.Block) { b.Free[0] = -1 }, "outside"},
				{"ordinal 2^40", func(b *ipam.Block) { b.Free[0] = 1 << 40 }, "outside"},
				{"allocated ordinal 2^40", func(b *ipam.Block) { delete(b.Owners, held); b.Owners[1<<40] = "h1" }, "outside"},
				{"ordinal twice in the queue", func(b *ipam.Block) { b.Free[1] = b.Free[0] }, "twice"},
				{"ordinal in neither", func(b *ipam.Block) { b.Free = b.Free[1:] }, "want 64 in all"},
				{"empty handle name", func(b *ipam.Block) { b.Owners[held] = "" }, "empty handle"},
				{"unmasked CIDR", func(b *ipam.Block) { b.CIDR = netip.PrefixFrom(b.CIDR.Addr().Next(), b.CIDR.Bits()) }, "masked"},
				{"no CIDR", func(b *ipam.Block) { b.CIDR = netip.Prefix{} }, "masked"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					b := deepCopy(used)
					tc.forge(&b)
					err := b.Validate()
					if !errors.Is(err, ipam.ErrInvalidBlock) || !strings.Contains(err.Error(), tc.want) {
						t.Fatalf("Validate() = %v, want ErrInvalidBlock saying %q", err, tc.want)
					}
				})
			}
		})
}

// TestBlockValidateTooLarge: a block of more than 2^16 addresses is
// refused before anything is allocated for its size.
func TestBlockValidateTooLarge(t *testing.T) {
	for _, p := range []string{"10.0.0.0/8", "fd00::/64", "fd00::/0"} {
		b := ipam.Block{CIDR: prefix(p), Pool: "p"}
		if err := b.Validate(); !errors.Is(err, ipam.ErrInvalidBlock) {
			t.Errorf("Validate(%s) = %v, want ErrInvalidBlock", p, err)
		}
	}
}
