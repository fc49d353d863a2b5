package ipam_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// benchBlocks returns the first block of pool (ordinal 0 is the network
// address, ordinal 1 the gateway) in three states: empty; fragmented, with
// every other address taken and the free queue shuffled; and nearly full,
// with one free address at the back of the queue behind the two reserved
// ordinals.
func benchBlocks(b *testing.B, pool ipam.Pool) map[string]ipam.Block {
	cidr := pool.BlockAt(0)
	empty := ipam.NewBlock(pool, cidr, "n")
	size := empty.Size()

	frag := ipam.Block{CIDR: cidr, Pool: pool.Name, Node: "n", Owners: map[int]string{}}
	for ord := range size {
		if ord%2 == 0 && ord > 0 {
			frag.Owners[ord] = fmt.Sprintf("h%d", ord)
		} else {
			frag.Free = append(frag.Free, ord)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(frag.Free), func(i, j int) { frag.Free[i], frag.Free[j] = frag.Free[j], frag.Free[i] })

	full := ipam.Block{CIDR: cidr, Pool: pool.Name, Node: "n", Owners: map[int]string{}, Free: []int{0, 1, size - 1}}
	for ord := 2; ord < size-1; ord++ {
		full.Owners[ord] = fmt.Sprintf("h%d", ord)
	}

	out := map[string]ipam.Block{"empty": empty, "fragmented": frag, "nearly-full": full}
	for name, blk := range out {
		if probs := blk.Check(); len(probs) > 0 {
			b.Fatalf("%s block: %v", name, probs)
		}
		if blk.FreeCount(pool) == 0 {
			b.Fatalf("%s block has no free address", name)
		}
	}
	return out
}

func BenchmarkBlockAssign(b *testing.B) {
	for _, pool := range []ipam.Pool{
		{Name: "v4", CIDR: netip.MustParsePrefix("10.0.0.0/16"), BlockSize: 26, Gateway: netip.MustParseAddr("10.0.0.1")},
		{Name: "v6", CIDR: netip.MustParsePrefix("fd00::/64"), BlockSize: 122, Gateway: netip.MustParseAddr("fd00::1")},
	} {
		blocks := benchBlocks(b, pool)
		for _, state := range []string{"empty", "fragmented", "nearly-full"} {
			blk := blocks[state]
			b.Run(fmt.Sprintf("%s-/%d-%s", pool.Name, pool.BlockSize, state), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, _, err := blk.Assign(pool, "bench"); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkPoolUsable(b *testing.B) {
	pool := ipam.Pool{Name: "v4", CIDR: netip.MustParsePrefix("10.0.0.0/16"), BlockSize: 26,
		Gateway: netip.MustParseAddr("10.0.0.1"), Exclude: []netip.Prefix{netip.MustParsePrefix("10.0.7.0/24")}}
	b.ReportAllocs()
	for b.Loop() {
		if pool.Usable() != 65534-1-256 {
			b.Fatal(pool.Usable())
		}
	}
}
