package storetest

import (
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// family is one address family's fixtures: a pool and its first blocks.
type family struct {
	name string
	pool ipam.Pool
}

// families are the IPv4 and IPv6 cases every table runs side by side.
var families = []family{
	{"IPv4", ipam.Pool{Name: "v4", CIDR: netip.MustParsePrefix("10.20.0.0/16"), BlockSize: 26, Gateway: netip.MustParseAddr("10.20.0.1")}},
	{"IPv6", ipam.Pool{Name: "fd00:20::-64", CIDR: netip.MustParsePrefix("fd00:20::/64"), BlockSize: 122}},
}

// blockOf returns block i of pool p, affine to node.
func blockOf(p ipam.Pool, i uint64, node string) ipam.Block {
	return ipam.NewBlock(p, p.BlockAt(i), node)
}

// handle returns a handle record of node for the attachment named by
// container, holding no addresses yet.
func handle(node, container string) ipam.Handle {
	return ipam.Handle{
		ID: ipam.HandleID("net1", container, "eth0"), Network: "net1", ContainerID: container, IfName: "eth0",
		Node: node, NetNS: "/var/run/netns/cni-" + container, Namespace: "default", Pod: "pod-" + container,
		PodUID:  "uid-" + container,
		Created: time.Date(2026, 11, 23, 13, 0, 0, 123456789, time.UTC),
	}
}

// assign gives h the first free address of n's block cidr of p, in place.
func assign(t testing.TB, n *store.Node, p ipam.Pool, cidr netip.Prefix, h *ipam.Handle) {
	t.Helper()
	if err := tryAssign(n, p, cidr, h); err != nil {
		t.Fatal(err)
	}
}

// tryAssign is assign for goroutines other than the test's.
func tryAssign(n *store.Node, p ipam.Pool, cidr netip.Prefix, h *ipam.Handle) error {
	for i, b := range n.Blocks {
		if b.Pool != p.Name || b.CIDR != cidr {
			continue
		}
		nb, a, err := b.Assign(p, h.ID)
		if err != nil {
			return fmt.Errorf("assign in %s: %w", cidr, err)
		}
		n.Blocks[i] = nb
		h.IPs = append(h.IPs, ipam.HandleIP{Addr: a, Pool: p.Name, Block: cidr})
		return nil
	}
	return fmt.Errorf("node %q holds no block %s of %q", n.Name, cidr, p.Name)
}

// release frees every address of handle id in n, in place, and drops its
// record.
func release(t testing.TB, n *store.Node, id string) {
	t.Helper()
	if err := tryRelease(n, id); err != nil {
		t.Fatal(err)
	}
}

// tryRelease is release for goroutines other than the test's.
func tryRelease(n *store.Node, id string) error {
	h, ok := n.Handle(id)
	if !ok {
		return fmt.Errorf("node %q has no handle %q", n.Name, id)
	}
	for _, ip := range h.IPs {
		for i, b := range n.Blocks {
			if b.Pool == ip.Pool && b.CIDR == ip.Block {
				nb, err := b.Release(ip.Addr, id)
				if err != nil {
					return fmt.Errorf("release %s: %w", ip.Addr, err)
				}
				n.Blocks[i] = nb
			}
		}
	}
	n.Handles = slices.DeleteFunc(slices.Clone(n.Handles), func(h ipam.Handle) bool { return h.ID == id })
	return nil
}

// DualStackNode builds a node object with one block of each family and
// pods handles, each holding one address of each family (60 at most). Two
// handles are released again so that the free queues are not in address
// order. Other packages' tests and benchmarks use it as a typical node.
func DualStackNode(t testing.TB, name string, pods int) store.Node {
	t.Helper()
	return dualStackNodeAt(t, name, pods, 1)
}

// dualStackNodeAt is DualStackNode in block i of each family: node
// objects stored side by side hold distinct blocks (a block is one
// node's, and on Kubernetes its state is its claim's object).
func dualStackNodeAt(t testing.TB, name string, pods int, i uint64) store.Node {
	t.Helper()
	n := store.Node{Name: name}
	for _, f := range families {
		n.Blocks = append(n.Blocks, blockOf(f.pool, i, name))
	}
	for j := range pods + 2 {
		h := handle(name, fmt.Sprintf("c%03d", j))
		for _, f := range families {
			assign(t, &n, f.pool, f.pool.BlockAt(i), &h)
		}
		n.Handles = append(n.Handles, h)
	}
	release(t, &n, ipam.HandleID("net1", "c000", "eth0"))
	release(t, &n, ipam.HandleID("net1", "c001", "eth0"))
	return n
}

// wantErr fails unless err wraps target.
func wantErr(t testing.TB, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: error %v, want one wrapping %q", what, err, target)
	}
}

// wantNoConflict is wantErr for a write that found the object there
// (ErrExists) or gone (ErrNotFound): the error must not wrap ErrConflict
// too, which callers take as "re-read and retry the same write".
func wantNoConflict(t testing.TB, err, target error, what string) {
	t.Helper()
	wantErr(t, err, target, what)
	if errors.Is(err, store.ErrConflict) {
		t.Fatalf("%s: error %v wraps %q as well as %q", what, err, store.ErrConflict, target)
	}
}

// noErr fails on err.
func noErr(t testing.TB, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// sameNode fails unless got holds exactly want's blocks and handles.
func sameNode(t testing.TB, got, want store.Node, what string) {
	t.Helper()
	g, w := got.Normalized(), want.Normalized()
	g.Version, w.Version = "", ""
	normalize(&g)
	normalize(&w)
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%s:\n got  %+v\n want %+v", what, g, w)
	}
}

// normalize makes empty and nil slices and maps compare equal and times
// compare by instant.
func normalize(n *store.Node) {
	if len(n.Blocks) == 0 {
		n.Blocks = nil
	}
	if len(n.Handles) == 0 {
		n.Handles = nil
	}
	if len(n.Loans) == 0 {
		n.Loans = nil
	}
	for i := range n.Blocks {
		if len(n.Blocks[i].Owners) == 0 {
			n.Blocks[i].Owners = nil
		}
		if len(n.Blocks[i].Free) == 0 {
			n.Blocks[i].Free = nil
		}
	}
	for i := range n.Handles {
		n.Handles[i].Created = n.Handles[i].Created.UTC()
	}
}
