package ipam_test

import (
	"fmt"
	"net/netip"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// A pool must hold at least one block: a /28 cannot be cut into /26
// blocks, and the error says how to fix it.
func ExamplePool_Validate() {
	pool := ipam.Pool{Name: "small", CIDR: netip.MustParsePrefix("10.22.0.0/28"), BlockSize: 26}
	fmt.Println(pool.Validate())

	pool.BlockSize = 28
	fmt.Println(pool.Validate(), pool.Usable())
	// Output:
	// invalid pool: pool "small": pool 10.22.0.0/28 is smaller than its block size /26: use a block size of /28 or longer
	// <nil> 14
}

// Assign hands out the first free address the pool permits (here skipping
// the network address and the gateway); a released address goes to the
// back of the free queue, so it is not reused while others are free.
func ExampleBlock_Assign() {
	pool := ipam.Pool{Name: "p", CIDR: netip.MustParsePrefix("10.22.0.0/24"), BlockSize: 29,
		Gateway: netip.MustParseAddr("10.22.0.1")}
	b := ipam.NewBlock(pool, pool.BlockAt(0), "node-a")

	b, a1, _ := b.Assign(pool, "net.c1.eth0")
	b, a2, _ := b.Assign(pool, "net.c2.eth0")
	fmt.Println(a1, a2)

	b, _ = b.Release(a1, "net.c1.eth0")
	b, a3, _ := b.Assign(pool, "net.c3.eth0")
	fmt.Println(a3, b.InUse(), b.FreeCount(pool))
	// Output:
	// 10.22.0.2 10.22.0.3
	// 10.22.0.4 2 4
}
