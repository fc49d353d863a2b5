package store

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

var editPool = ipam.Pool{Name: "v4", CIDR: netip.MustParsePrefix("10.1.0.0/24"), BlockSize: 26}

// assignEdit gives a new handle of container c the first free address
// of block bi of n, by the edits.
func assignEdit(t *testing.T, n Node, bi int, c string) Node {
	t.Helper()
	h := ipam.Handle{ID: ipam.HandleID("net", c, "eth0"), Network: "net", ContainerID: c, IfName: "eth0", Node: n.Name}
	b, a, err := n.Blocks[bi].Assign(editPool, h.ID)
	if err != nil {
		t.Fatal(err)
	}
	h.IPs = []ipam.HandleIP{{Addr: a, Pool: b.Pool, Block: b.CIDR}}
	return n.PutBlock(b).PutRecord(h)
}

// sameAsFull holds that Changes from the edits' log equals the whole
// comparison, and returns it.
func sameAsFull(t *testing.T, n Node) NodeChange {
	t.Helper()
	got, err := Changes(n)
	if err != nil {
		t.Fatal(err)
	}
	want, err := FullChanges(n)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Changes from the log\n got  %+v\n want %+v", got, want)
	}
	return got
}

// TestEditsFork: two edits appending to one object each get their own
// record, and neither changes the object they started from or the other.
func TestEditsFork(t *testing.T) {
	base := partsFixture(t, editPool)
	base = AsStored(assignEdit(t, base, 0, "c3"), base.stored.parts) // spare capacity after the records
	want := slices.Clone(base.Handles)
	a := assignEdit(t, base, 0, "a")
	b := assignEdit(t, base, 1, "b")
	aa := assignEdit(t, a, 0, "aa")
	if !slices.Equal(recordIDs(base), recordIDs(Node{Handles: want})) {
		t.Fatalf("the base changed: %v", recordIDs(base))
	}
	for _, tc := range []struct {
		n    Node
		last string
	}{{a, "a"}, {b, "b"}, {aa, "aa"}} {
		ids := recordIDs(tc.n)
		if ids[len(ids)-1] != ipam.HandleID("net", tc.last, "eth0") || len(ids) != len(want)+len(tc.last) {
			t.Fatalf("records %v", ids)
		}
		c := sameAsFull(t, tc.n)
		if len(c.Records) != len(tc.last) {
			t.Fatalf("%s: changes %+v", tc.last, c)
		}
	}
}

func recordIDs(n Node) []string {
	var out []string
	for _, h := range n.Handles {
		out = append(out, h.ID)
	}
	return out
}

// TestEditsRefused: what the log names is validated as the whole object
// would be; a change the edits did not make is compared whole.
func TestEditsRefused(t *testing.T) {
	base := partsFixture(t, editPool)
	c1 := ipam.HandleID("net", "c1", "eth0")
	r1, _ := base.Handle(c1)
	b0 := base.Blocks[0]
	for _, tc := range []struct {
		name string
		edit func(Node) Node
		// ownersOnly: the whole comparison writes nothing for it (a
		// block's owners are not stored: decoding rebuilds them).
		ownersOnly bool
	}{
		{"an owner without a record", func(n Node) Node {
			b, _, _ := b0.Assign(editPool, "nobody")
			return n.PutBlock(b)
		}, false},
		{"a record whose block is not changed", func(n Node) Node {
			h := r1
			h.ID = "other"
			h.IPs = []ipam.HandleIP{{Addr: b0.Addr(5), Pool: b0.Pool, Block: b0.CIDR}}
			return n.PutRecord(h)
		}, false},
		{"a record dropped, its address still owned", func(n Node) Node { return n.DropRecord(c1) }, false},
		{"an address freed, its record kept", func(n Node) Node {
			b, err := b0.Release(r1.IPs[0].Addr, c1)
			if err != nil {
				t.Fatal(err)
			}
			return n.PutBlock(b)
		}, false},
		{"a block with addresses removed", func(n Node) Node { return n.DropBlock(BlockRef{b0.Pool, b0.CIDR}) }, false},
		{"an owner renamed, not its record", func(n Node) Node {
			b := b0
			b.Owners = maps.Clone(b.Owners)
			ord, _ := b.Ordinal(r1.IPs[0].Addr)
			b.Owners[ord] = "renamed"
			return n.PutBlock(b)
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := tc.edit(base)
			if n.tracked() == nil {
				t.Fatal("the edit is not logged")
			}
			if _, err := Changes(n); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Changes = %v, want ErrInvalid", err)
			}
			if _, err := FullChanges(n); !tc.ownersOnly && !errors.Is(err, ErrInvalid) {
				t.Fatalf("FullChanges = %v, want ErrInvalid", err)
			}
		})
	}
	t.Run("lists changed otherwise", func(t *testing.T) {
		n := assignEdit(t, base, 0, "c3")
		n.Handles = slices.Clone(n.Handles)
		n.Handles[0].Pod = "changed in a copy"
		if n.tracked() != nil {
			t.Fatal("a list set by hand is taken as logged")
		}
		if c := sameAsFull(t, n); len(c.Records) != 2 {
			t.Fatalf("changes %+v", c)
		}
		// Later edits of it are compared whole too.
		if next := assignEdit(t, n, 1, "c4"); next.tracked() != nil {
			t.Fatal("an edit of a list set by hand is taken as logged")
		}
	})
	t.Run("edits undone", func(t *testing.T) {
		n := assignEdit(t, base, 0, "c3")
		b, _ := base.Block(BlockRef{b0.Pool, b0.CIDR})
		n = n.PutBlock(b).DropRecord(ipam.HandleID("net", "c3", "eth0"))
		if c := sameAsFull(t, n); !c.Empty() {
			t.Fatalf("changes %+v", c)
		}
	})
}

// TestRecordIndex: the index finds every record of every copy, through
// appends, drops, renames, writes and forks.
func TestRecordIndex(t *testing.T) {
	p := ipam.Pool{Name: "v4", CIDR: netip.MustParsePrefix("10.2.0.0/16"), BlockSize: 24}
	n := Node{Name: "node-a"}
	for i := range 2 {
		n = n.PutBlock(ipam.NewBlock(p, p.BlockAt(uint64(i)), n.Name))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var kept []Node
	for step := range 600 {
		switch op := rng.IntN(10); {
		case op < 6 || len(n.Handles) == 0:
			n = assignIn(t, p, n, rng.IntN(2), fmt.Sprint("c", step))
		case op < 8:
			h := n.Handles[rng.IntN(len(n.Handles))]
			n = n.DropRecord(h.ID)
		case op == 8:
			h := n.Handles[rng.IntN(len(n.Handles))]
			r := h
			r.ID = fmt.Sprint("renamed-", step)
			n = n.ReplaceRecord(h.ID, r)
		default:
			n = AsStored(n, Parts{Head: Version(fmt.Sprint(step))})
		}
		if rng.IntN(20) == 0 {
			kept = append(kept, n)
		}
		for _, c := range append([]Node{n}, kept...) {
			for i := range c.Handles {
				if j := c.recordIndex(c.Handles[i].ID); j != i {
					t.Fatalf("step %d: record %q at %d found at %d", step, c.Handles[i].ID, i, j)
				}
			}
			if j := c.recordIndex("absent"); j != -1 {
				t.Fatalf("step %d: an absent record found at %d", step, j)
			}
		}
	}
	if len(n.Handles) < 2*minIndexed {
		t.Fatalf("only %d records: the index was hardly used", len(n.Handles))
	}
}

// assignIn gives a record of id the first free address of block bi of n
// (not validated: the blocks' owners serve the index's test only).
func assignIn(t *testing.T, p ipam.Pool, n Node, bi int, id string) Node {
	t.Helper()
	b, a, err := n.Blocks[bi].Assign(p, id)
	if err != nil {
		t.Fatal(err)
	}
	return n.PutBlock(b).PutRecord(ipam.Handle{ID: id, Node: n.Name, IPs: []ipam.HandleIP{{Addr: a, Pool: p.Name, Block: b.CIDR}}})
}
