package nodealloc_test

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/nodealloc"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

func TestTakeAndRemoveBlock(t *testing.T) {
	cases := []struct {
		name      string
		pool      ipam.Pool
		block     uint64
		first     string // the first address handed out
		reserved  string // an address of the block the pool never hands out
		outside   string // an address of the pool in no block of the node
		blockSize int
	}{
		{"IPv4", pool4, 0, "10.1.0.2", "10.1.0.1", "10.1.0.200", 16},
		{"IPv6", pool6, 0, "fd00:1::1", "fd00:1::", "fd00:1::80", 16},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := store.Node{Name: "node-a"}
			h := newHandle(new(int))
			_, _, err := nodealloc.Take(n, c.pool, h)
			if !errors.Is(err, nodealloc.ErrNoRoom) {
				t.Fatalf("Take without blocks = %v, want ErrNoRoom", err)
			}
			cidr := c.pool.BlockAt(c.block)
			n = nodealloc.AddBlock(n, c.pool, cidr)
			if again := nodealloc.AddBlock(n, c.pool, cidr); len(again.Blocks) != 1 {
				t.Fatalf("adding a held block again gave %d blocks", len(again.Blocks))
			}
			n, ip, err := nodealloc.Take(n, c.pool, h)
			if err != nil || ip.Addr != netip.MustParseAddr(c.first) || ip.Block != cidr {
				t.Fatalf("Take = %v, %v; want %s in %s", ip, err, c.first, cidr)
			}
			if _, _, err := nodealloc.TakeAddr(n, c.pool, ip.Addr, newHandle(new(int))); !errors.Is(err, nodealloc.ErrTaken) {
				t.Fatalf("TakeAddr of a held address = %v, want ErrTaken", err)
			}
			if _, _, err := nodealloc.TakeAddr(n, c.pool, netip.MustParseAddr(c.reserved), newHandle(new(int))); !errors.Is(err, nodealloc.ErrTaken) {
				t.Fatalf("TakeAddr of a reserved address = %v, want ErrTaken", err)
			}
			if _, _, err := nodealloc.TakeAddr(n, c.pool, netip.MustParseAddr(c.outside), newHandle(new(int))); !errors.Is(err, nodealloc.ErrNotHeld) {
				t.Fatalf("TakeAddr outside the node's blocks = %v, want ErrNotHeld", err)
			}
			ref := store.BlockRef{Pool: c.pool.Name, CIDR: cidr}
			if _, err := nodealloc.RemoveBlock(n, ref); !errors.Is(err, nodealloc.ErrTaken) {
				t.Fatalf("RemoveBlock of a block in use = %v, want ErrTaken", err)
			}
			n, freed := nodealloc.Release(n, h.ID)
			if len(freed) != 1 || freed[0] != ip {
				t.Fatalf("Release freed %v, want %v", freed, ip)
			}
			n, err = nodealloc.RemoveBlock(n, ref)
			if err != nil || len(n.Blocks) != 0 {
				t.Fatalf("RemoveBlock of an empty block = %v, %d blocks left", err, len(n.Blocks))
			}
			if err := n.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestRenameRefuses(t *testing.T) {
	n := nodealloc.AddBlock(store.Node{Name: "node-a"}, pool4, pool4.BlockAt(1))
	var counter int
	old := newHandle(&counter)
	n, _, err := nodealloc.Take(n, pool4, old)
	if err != nil {
		t.Fatal(err)
	}
	other := newHandle(&counter)
	n, _, err = nodealloc.Take(n, pool4, other)
	if err != nil {
		t.Fatal(err)
	}
	observed, _ := n.Handle(old.ID)
	if _, err := nodealloc.Rename(n, observed, other); !errors.Is(err, nodealloc.ErrTaken) {
		t.Fatalf("Rename onto a handle with a record = %v, want ErrTaken", err)
	}
	stale := observed
	stale.ContainerID = "earlier"
	if _, err := nodealloc.Rename(n, stale, newHandle(&counter)); !errors.Is(err, nodealloc.ErrChanged) {
		t.Fatalf("Rename of a changed record = %v, want ErrChanged", err)
	}
	gone, _ := nodealloc.Release(n, old.ID)
	if _, err := nodealloc.Rename(gone, observed, newHandle(&counter)); !errors.Is(err, nodealloc.ErrNotHeld) {
		t.Fatalf("Rename of a released record = %v, want ErrNotHeld", err)
	}
}

// A dual-stack allocation in one node object: both addresses, one record,
// one write for the caller.
func ExampleTake() {
	n := store.Node{Name: "node-a"}
	n = nodealloc.AddBlock(n, pool4, pool4.BlockAt(1))
	n = nodealloc.AddBlock(n, pool6, pool6.BlockAt(1))
	h := ipam.Handle{ID: "net.c1.eth0", Network: "net", ContainerID: "c1", IfName: "eth0", Node: "node-a"}
	n, ip4, _ := nodealloc.Take(n, pool4, h)
	n, ip6, _ := nodealloc.Take(n, pool6, h)
	rec, _ := n.Handle(h.ID)
	fmt.Println(ip4.Addr, ip6.Addr, len(rec.IPs), n.Validate())
	// Output: 10.1.0.16 fd00:1::10 2 <nil>
}
