package store

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// partsFixture is a node object of two blocks of pool p, the first
// holding two handles, as a backend returns it after storing it.
func partsFixture(t *testing.T, p ipam.Pool) Node {
	t.Helper()
	n := Node{Name: "node-a"}
	for i := range 2 {
		n.Blocks = append(n.Blocks, ipam.NewBlock(p, p.BlockAt(uint64(i)), n.Name))
	}
	for _, c := range []string{"c1", "c2"} {
		n = takeFor(t, n, p, 0, c)
	}
	parts := Parts{Head: "1", Blocks: map[BlockRef]Version{}}
	for _, b := range n.Blocks {
		parts.Blocks[BlockRef{b.Pool, b.CIDR}] = "1"
	}
	return AsStored(n, parts)
}

// takeFor returns a copy of n in which a new handle of container c holds
// the first free address of block bi, the slices copied as nodealloc
// copies them.
func takeFor(t *testing.T, n Node, p ipam.Pool, bi int, c string) Node {
	t.Helper()
	out := n
	out.Blocks = slices.Clone(n.Blocks)
	out.Handles = slices.Clone(n.Handles)
	h := ipam.Handle{ID: ipam.HandleID("net", c, "eth0"), Network: "net", ContainerID: c, IfName: "eth0",
		Node: n.Name, Pod: "pod-" + c, Namespace: "default", Created: time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)}
	b, a, err := out.Blocks[bi].Assign(p, h.ID)
	if err != nil {
		t.Fatal(err)
	}
	out.Blocks[bi] = b
	h.IPs = []ipam.HandleIP{{Addr: a, Pool: p.Name, Block: b.CIDR}}
	out.Handles = append(out.Handles, h)
	return out
}

func TestChanges(t *testing.T) {
	pools := []ipam.Pool{
		{Name: "v4", CIDR: netip.MustParsePrefix("10.1.0.0/24"), BlockSize: 26},
		{Name: "v6", CIDR: netip.MustParsePrefix("fd00:1::/120"), BlockSize: 122},
	}
	for _, p := range pools {
		ref := func(i int) BlockRef { return BlockRef{p.Name, p.BlockAt(uint64(i))} }
		id := func(c string) string { return ipam.HandleID("net", c, "eth0") }
		cases := []struct {
			name   string
			change func(Node) Node
			want   NodeChange
		}{
			{"unchanged", func(n Node) Node { return n }, NodeChange{}},
			{"a copy, unchanged", func(n Node) Node {
				n.Blocks, n.Handles = slices.Clone(n.Blocks), slices.Clone(n.Handles)
				return n
			}, NodeChange{}},
			{"an address taken in the second block", func(n Node) Node { return takeFor(t, n, p, 1, "c3") },
				NodeChange{Blocks: []BlockRef{ref(1)}, Records: []string{id("c3")}}},
			{"a record released", func(n Node) Node {
				h := n.Handles[0]
				b, err := n.Blocks[0].Release(h.IPs[0].Addr, h.ID)
				if err != nil {
					t.Fatal(err)
				}
				n.Blocks = slices.Clone(n.Blocks)
				n.Blocks[0] = b
				n.Handles = slices.Delete(slices.Clone(n.Handles), 0, 1)
				return n
			}, NodeChange{Blocks: []BlockRef{ref(0)}, Dropped: []string{id("c1")}}},
			{"an attribute of a record", func(n Node) Node {
				n.Handles = slices.Clone(n.Handles)
				n.Handles[1].NetNS = "/var/run/netns/x"
				return n
			}, NodeChange{Blocks: []BlockRef{ref(0)}, Records: []string{id("c2")}}},
			{"a loan", func(n Node) Node {
				n.Loans = []Loan{{Handle: id("c9"), Lender: "node-b"}}
				return n
			}, NodeChange{Head: true}},
			{"an empty block removed", func(n Node) Node {
				n.Blocks = n.Blocks[:1]
				return n
			}, NodeChange{Removed: []BlockRef{ref(1)}}},
		}
		for _, tc := range cases {
			t.Run(p.Name+"/"+tc.name, func(t *testing.T) {
				n := partsFixture(t, p)
				got, err := Changes(tc.change(n))
				if err != nil {
					t.Fatal(err)
				}
				tc.want.Node, tc.want.Parts = n.Name, n.stored.parts
				if !equalChange(got, tc.want) {
					t.Fatalf("Changes = %+v\nwant      %+v", got, tc.want)
				}
			})
		}
		t.Run(p.Name+"/never stored", func(t *testing.T) {
			n := partsFixture(t, p)
			n.stored, n.Version = nil, ""
			got, err := Changes(n)
			if err != nil {
				t.Fatal(err)
			}
			want := NodeChange{Node: n.Name, Head: true, Blocks: []BlockRef{ref(0), ref(1)}, Records: []string{id("c1"), id("c2")}}
			if !equalChange(got, want) {
				t.Fatalf("Changes = %+v\nwant      %+v", got, want)
			}
		})
		t.Run(p.Name+"/invalid", func(t *testing.T) {
			n := partsFixture(t, p)
			n.Handles = append(slices.Clone(n.Handles), n.Handles[0])
			if _, err := Changes(n); err == nil {
				t.Fatal("Changes of an object holding a record twice: no error")
			}
		})
	}
}

func equalChange(a, b NodeChange) bool {
	return a.Node == b.Node && a.Head == b.Head && slices.Equal(a.Blocks, b.Blocks) && slices.Equal(a.Removed, b.Removed) &&
		slices.Equal(a.Records, b.Records) && slices.Equal(a.Dropped, b.Dropped) && CompositeVersion(a.Parts) == CompositeVersion(b.Parts)
}

func TestCompositeVersion(t *testing.T) {
	r := BlockRef{"p", netip.MustParsePrefix("10.0.0.0/26")}
	a := Parts{Head: "3", Blocks: map[BlockRef]Version{r: "5"}}
	b := Parts{Head: "3", Blocks: map[BlockRef]Version{r: "6"}}
	if CompositeVersion(a) == CompositeVersion(b) {
		t.Fatal("a block's new version leaves the composite unchanged")
	}
	if CompositeVersion(a) != CompositeVersion(Parts{Head: "3", Blocks: map[BlockRef]Version{r: "5"}}) {
		t.Fatal("equal parts, different composites")
	}
	if CompositeVersion(Parts{}) != "" {
		t.Fatal("nothing stored must be the empty Version")
	}
}

// TestChangesValidates: whatever a change does to a stored node object
// (records added, dropped, edited, moved; blocks edited, added, removed;
// each of them corrupting it or not), Changes accepts it only when the
// whole object is valid, and what it reports dropped is what is gone.
func TestChangesValidates(t *testing.T) {
	p := ipam.Pool{Name: "v4", CIDR: netip.MustParsePrefix("10.1.0.0/24"), BlockSize: 26}
	rng := rand.New(rand.NewPCG(1, 2))
	base := partsFixture(t, p)
	for range 40 {
		base = takeFor(t, base, p, rng.IntN(2), fmt.Sprintf("r%d", rng.Int()))
	}
	base = AsStored(base, base.stored.parts)
	mutations := []func(n *Node){
		func(n *Node) {
			if len(n.Blocks) > 1 && n.Blocks[1].FreeCount(p) > 0 {
				*n = takeFor(t, *n, p, 1, fmt.Sprintf("m%d", rng.Int()))
			}
		},
		func(n *Node) { // a record dropped, its address freed or not
			i := rng.IntN(len(n.Handles))
			h := n.Handles[i]
			if rng.IntN(2) == 0 {
				bi := slices.IndexFunc(n.Blocks, func(b ipam.Block) bool { return b.CIDR == h.IPs[0].Block })
				if bi >= 0 {
					if b, err := n.Blocks[bi].Release(h.IPs[0].Addr, h.ID); err == nil {
						n.Blocks[bi] = b
					}
				}
			}
			n.Handles = slices.Delete(n.Handles, i, i+1)
		},
		func(n *Node) { n.Handles[rng.IntN(len(n.Handles))].Pod = "renamed" },
		func(n *Node) { // a record given another's ID
			i, j := rng.IntN(len(n.Handles)), rng.IntN(len(n.Handles))
			n.Handles[i].ID = n.Handles[j].ID
		},
		func(n *Node) { // a record given another's address
			i, j := rng.IntN(len(n.Handles)), rng.IntN(len(n.Handles))
			n.Handles[i].IPs = slices.Clone(n.Handles[j].IPs)
		},
		func(n *Node) { // records swapped
			i, j := rng.IntN(len(n.Handles)), rng.IntN(len(n.Handles))
			n.Handles[i], n.Handles[j] = n.Handles[j], n.Handles[i]
		},
		func(n *Node) { // a free ordinal dropped from a queue
			b := &n.Blocks[rng.IntN(len(n.Blocks))]
			if len(b.Free) > 0 {
				b.Free = b.Free[1:]
			}
		},
		func(n *Node) { n.Blocks = n.Blocks[:1] }, // the second block removed
		func(n *Node) { n.Blocks = append(n.Blocks, n.Blocks[0]) },
		func(n *Node) { n.Handles[rng.IntN(len(n.Handles))].Node = "" },
		func(n *Node) { n.Handles = append(n.Handles, n.Handles[rng.IntN(len(n.Handles))]) },
	}
	for i := range 2000 {
		n := base
		n.Blocks = make([]ipam.Block, len(base.Blocks))
		for k, b := range base.Blocks {
			b.Free, b.Owners = slices.Clone(b.Free), maps.Clone(b.Owners)
			n.Blocks[k] = b
		}
		n.Handles = slices.Clone(base.Handles)
		for k := range n.Handles {
			n.Handles[k].IPs = slices.Clone(n.Handles[k].IPs)
		}
		for range 1 + rng.IntN(3) {
			mutations[rng.IntN(len(mutations))](&n)
		}
		c, err := Changes(n)
		whole := n.Validate()
		if err == nil && whole != nil {
			t.Fatalf("case %d: Changes accepted an invalid object: %v", i, whole)
		}
		if err != nil && whole == nil {
			t.Fatalf("case %d: Changes refused a valid object: %v", i, err)
		}
		if err != nil {
			continue
		}
		for _, id := range c.Dropped {
			if _, ok := n.Handle(id); ok {
				t.Fatalf("case %d: %q reported dropped, still held", i, id)
			}
		}
		for _, h := range base.Handles {
			if _, ok := n.Handle(h.ID); !ok && !slices.Contains(c.Dropped, h.ID) {
				t.Fatalf("case %d: %q gone, not reported dropped", i, h.ID)
			}
		}
	}
}
