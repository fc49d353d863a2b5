package allocator_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/consistency"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store/local"
)

// att is one attachment: network, container ID, interface name.
type att struct{ network, container, ifname string }

func (x att) id() string { return ipam.HandleID(x.network, x.container, x.ifname) }

func (x att) request(node string, sets ...[]string) allocator.Request {
	return allocator.Request{
		Handle: ipam.Handle{ID: x.id(), Network: x.network, ContainerID: x.container, IfName: x.ifname, Node: node},
		Sets:   sets,
	}
}

// collidingPairs are the attachments issue 7 found sharing a handle (and
// so an address) when handle IDs were the parts joined by dots.
var collidingPairs = [][2]att{
	{{"n", "a.b", "eth0"}, {"n", "a", "b.eth0"}},
	{{"n", "x.y", "eth0"}, {"n.x", "y", "eth0"}},
	{{"n", "c", "eth0.100"}, {"n", "c.eth0", "100"}},
}

// TestHandleIDCollisions: attachments whose parts differ only in where the
// dots are get their own addresses, and DEL of one releases exactly its
// own, for IPv4 and IPv6.
func TestHandleIDCollisions(t *testing.T) {
	ctx := context.Background()
	forFams(t, func(t *testing.T, f fam) {
		for _, pair := range collidingPairs {
			t.Run(pair[0].id()+" vs "+pair[1].id(), func(t *testing.T) {
				a, s := setup(t, f.pool("p", 2))
				x, err := a.Allocate(ctx, pair[0].request("node-a", set("p")))
				if err != nil {
					t.Fatal(err)
				}
				y, err := a.Allocate(ctx, pair[1].request("node-a", set("p")))
				if err != nil {
					t.Fatal(err)
				}
				if x.IPs[0].Addr == y.IPs[0].Addr {
					t.Fatalf("%+v and %+v both got %s", pair[0], pair[1], x.IPs[0].Addr)
				}
				freed, err := a.Release(ctx, pair[0].id())
				if err != nil || !slices.Equal(freed, []netip.Addr{x.IPs[0].Addr}) {
					t.Fatalf("DEL of %+v freed %v, %v; want only %s", pair[0], freed, err, x.IPs[0].Addr)
				}
				if h, ok, err := a.Handle(ctx, pair[1].id()); err != nil || !ok || h.IPs[0].Addr != y.IPs[0].Addr {
					t.Fatalf("after DEL of %+v, %+v holds %+v, %v, %v; want %s", pair[0], pair[1], h, ok, err, y.IPs[0].Addr)
				}
				if owners := checkConsistent(t, a, s); owners[y.IPs[0].Addr] != pair[1].id() || len(owners) != 1 {
					t.Fatalf("owners after DEL = %v", owners)
				}
			})
		}
	})
}

// legacyStore writes, with the current code's encoding, what an earlier
// version (handle IDs joined by unescaped dots) left in a bbolt file after
// ADDs of the attachments: a pool, node-a's block with its affinity, and
// one handle per attachment ID. Attachments that share an old ID share
// the handle of the first of them, as the old code's idempotent ADD made
// them. It returns the address of each attachment.
func legacyStore(t *testing.T, dir string, pool ipam.Pool, atts []att) map[att]netip.Addr {
	t.Helper()
	ctx := context.Background()
	s, err := local.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cidr := pool.BlockAt(0)
	blk := ipam.NewBlock(pool, cidr, "node-a")
	handles := map[string]*ipam.Handle{}
	var order []string
	got := map[att]netip.Addr{}
	for _, x := range atts {
		old := ipam.LegacyHandleID(x.network, x.container, x.ifname)
		if h := handles[old]; h != nil {
			got[x] = h.IPs[0].Addr
			continue
		}
		nb, a, err := blk.Assign(pool, old)
		if err != nil {
			t.Fatal(err)
		}
		blk = nb
		handles[old] = &ipam.Handle{ID: old, Network: x.network, ContainerID: x.container, IfName: x.ifname, Node: "node-a",
			Created: epoch, IPs: []ipam.HandleIP{{Addr: a, Pool: pool.Name, Block: cidr}}}
		order = append(order, old)
		got[x] = a
	}
	ops := []kv.Op{
		{Key: allocator.PoolKey(pool.Name), Value: allocator.Encode(pool)},
		{Key: allocator.BlockKey(pool.Name, cidr), Value: allocator.Encode(blk)},
		{Key: allocator.AffinityKey("node-a", pool.Name, cidr), Value: []byte(allocator.BlockKey(pool.Name, cidr))},
	}
	for _, id := range order {
		ops = append(ops, kv.Op{Key: allocator.HandleKey(id), Value: allocator.Encode(handles[id])})
	}
	if err := s.Txn(ctx, nil, ops); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestLegacyHandleIDs opens a store written by an earlier version (handles
// under dot-joined IDs, some of whose parts contain dots) and checks that
// ADD finds an attachment's old handle (same address, moved to its new
// ID), that an attachment which collided with another gets its own
// address, that GC keeps every live attachment, that DEL of each
// attachment frees exactly its own address, and that the store checks
// clean throughout; for IPv4 and IPv6.
func TestLegacyHandleIDs(t *testing.T) {
	ctx := context.Background()
	forFams(t, func(t *testing.T, f fam) {
		pool := f.pool("p", 4)
		plain := att{"n", "plain", "eth0"}
		dotted := []att{{"n.x", "c1", "eth0"}, {"n", "c2", "eth0.100"}, {"n", "c.3", "net1"}}
		first, second := att{"n", "a.b", "eth0"}, att{"n", "a", "b.eth0"} // one old ID
		atts := append(append([]att{plain}, dotted...), first, second)
		dir := t.TempDir()
		old := legacyStore(t, dir, pool, atts)
		if old[first] != old[second] {
			t.Fatalf("the legacy store should have given both colliding attachments one address")
		}
		s, err := local.Open(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		a := newAllocator(t, s)
		mustCheckClean(t, s)

		// CHECK and DEL find a handle where an earlier version left it.
		if h, ok, err := a.Handle(ctx, dotted[2].id()); err != nil || !ok || h.IPs[0].Addr != old[dotted[2]] {
			t.Fatalf("Handle(%s) = %+v, %v, %v; want the stored handle with %s", dotted[2].id(), h, ok, err, old[dotted[2]])
		}
		if freed, err := a.Release(ctx, dotted[1].id()); err != nil || !slices.Equal(freed, []netip.Addr{old[dotted[1]]}) {
			t.Fatalf("DEL of %+v freed %v, %v; want %s", dotted[1], freed, err, old[dotted[1]])
		}
		mustCheckClean(t, s)
		atts = slices.DeleteFunc(atts, func(x att) bool { return x == dotted[1] })

		// ADD again of an attachment with dots: its old address, now under
		// its new ID, in the handle key and in its block.
		h, err := a.Allocate(ctx, dotted[0].request("node-a", set("p")))
		if err != nil || h.IPs[0].Addr != old[dotted[0]] || h.ID != dotted[0].id() {
			t.Fatalf("repeated ADD of %+v = %+v, %v; want %s under ID %s", dotted[0], h, err, old[dotted[0]], dotted[0].id())
		}
		if got := keys(t, s, allocator.HandleKey(ipam.LegacyHandleID("n.x", "c1", "eth0"))); len(got) != 0 {
			t.Fatalf("old handle key left after the move: %v", got)
		}
		if owners := checkConsistent(t, a, s); owners[old[dotted[0]]] != dotted[0].id() {
			t.Fatalf("block gives %s to %q, want %q", old[dotted[0]], owners[old[dotted[0]]], dotted[0].id())
		}
		// The attachment that shared first's old handle is not first: it
		// gets an address of its own.
		h2, err := a.Allocate(ctx, second.request("node-a", set("p")))
		if err != nil || h2.IPs[0].Addr == old[first] {
			t.Fatalf("ADD of %+v = %+v, %v; want an address other than %s (held by %+v)", second, h2, err, old[first], first)
		}
		want := map[att]netip.Addr{}
		for _, x := range atts {
			want[x] = old[x]
		}
		want[second] = h2.IPs[0].Addr

		// GC with every attachment live releases nothing, whatever ID its
		// handle is stored under.
		live := map[string]bool{}
		for _, x := range atts {
			live[x.id()] = true
		}
		released, err := a.ReleaseHandles(ctx, func(h ipam.Handle) bool { return !live[h.ID] })
		if err != nil || len(released) != 0 {
			t.Fatalf("GC with every attachment live released %v, %v", released, err)
		}
		mustCheckClean(t, s)

		// DEL of each attachment frees exactly its own address.
		for _, x := range atts {
			freed, err := a.Release(ctx, x.id())
			if err != nil || !slices.Equal(freed, []netip.Addr{want[x]}) {
				t.Fatalf("DEL of %+v freed %v, %v; want %s", x, freed, err, want[x])
			}
			mustCheckClean(t, s)
		}
		if got := keys(t, s, allocator.HandlePrefix); len(got) != 0 {
			t.Fatalf("handles left after DEL of every attachment: %v", got)
		}
	})
}

// TestLegacyHandleOnWarmHint: an ADD that reads nothing (warm hint) must
// still not give a second address to an attachment whose handle an earlier
// version stored under its old ID (a node not yet upgraded during a
// rolling upgrade writes such handles).
func TestLegacyHandleOnWarmHint(t *testing.T) {
	ctx := context.Background()
	forFams(t, func(t *testing.T, f fam) {
		pool := f.pool("p", 4)
		dir := t.TempDir()
		x := att{"n.x", "c1", "eth0"}
		old := legacyStore(t, dir, pool, []att{x})
		s, err := local.Open(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		a := newAllocator(t, s)
		// Warm node-b's hint: its own block, its pool.
		for i := range 2 {
			if _, err := a.Allocate(ctx, att{"m", fmt.Sprint("w", i), "eth0"}.request("node-b", set("p"))); err != nil {
				t.Fatal(err)
			}
		}
		// x moves to node-b (same attachment ID, e.g. a retried ADD).
		h, err := a.Allocate(ctx, x.request("node-b", set("p")))
		if err != nil || h.IPs[0].Addr != old[x] {
			t.Fatalf("ADD of %+v on a warm hint = %+v, %v; want its stored address %s", x, h, err, old[x])
		}
		checkConsistent(t, a, s)
	})
}

// mustCheckClean fails unless the consistency checker finds nothing.
func mustCheckClean(t *testing.T, s kv.Store) {
	t.Helper()
	rep, err := consistency.Check(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Err(); err != nil {
		t.Fatal(err)
	}
}
