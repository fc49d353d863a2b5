package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// testListNodesSticky: selecting the holders of a sticky identity
// returns exactly the objects holding a record of it (live, parked, or a
// borrower's in a lender's block), and follows the writes that drop the
// record, delete the object and give it the identity again.
func testListNodesSticky(t *testing.T, s store.Store) {
	ctx := t.Context()
	const id1, id2, none = "pod/db/pg-0", "vm/db/vm-1", "pod/db/pg-9"
	sticky := func(n *store.Node, i uint64, node, container, id string, parked bool, fam int) {
		h := handle(node, container)
		h.Sticky = id
		if parked {
			h.Parked = time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)
		}
		assign(t, n, families[fam].pool, families[fam].pool.BlockAt(i), &h)
		n.Handles = append(n.Handles, h)
	}
	a := dualStackNodeAt(t, "n-a", 1, 3)
	sticky(&a, 3, "n-a", "s1", id1, true, 0)
	b := dualStackNodeAt(t, "n-b", 1, 4)
	sticky(&b, 4, "node-x", "s2", id1, false, 1) // a borrower's record
	sticky(&b, 4, "n-b", "s3", id2, false, 0)
	c := dualStackNodeAt(t, "n-c", 1, 5)
	var err error
	for _, n := range []*store.Node{&a, &b, &c} {
		*n, err = s.CreateNode(ctx, *n)
		noErr(t, err, "CreateNode "+n.Name)
	}
	want := func(id string, names ...string) {
		t.Helper()
		got, err := s.ListNodes(ctx, store.NodeSelector{Sticky: id})
		noErr(t, err, "ListNodes(Sticky "+id+")")
		var gotNames []string
		for _, n := range got {
			gotNames = append(gotNames, n.Name)
		}
		if !slices.Equal(gotNames, names) {
			t.Fatalf("ListNodes(Sticky %s) = %q, want %q", id, gotNames, names)
		}
	}
	want(id1, "n-a", "n-b")
	want(id2, "n-b")
	want(none)
	release(t, &a, ipam.HandleID("net1", "s1", "eth0"))
	a, err = s.UpdateNode(ctx, a)
	noErr(t, err, "UpdateNode dropping the sticky record")
	want(id1, "n-b")
	noErr(t, s.DeleteNode(ctx, b), "DeleteNode")
	want(id1)
	want(id2)
	sticky(&a, 3, "n-a", "s4", id1, false, 1)
	_, err = s.UpdateNode(ctx, a)
	noErr(t, err, "UpdateNode holding the identity again")
	want(id1, "n-a")
}
