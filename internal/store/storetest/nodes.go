package storetest

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// testNodeRoundTrip: a node object reads back exactly as written — blocks
// of both families with their free queues in order, owners, records of
// borrowers and of attachments whose ID does not spell them.
func testNodeRoundTrip(t *testing.T, s store.Store) {
	ctx := t.Context()
	n := DualStackNode(t, "node-a", 5)
	// A borrower's dual-stack record.
	b := handle("node-b", "borrowed")
	for _, f := range families {
		assign(t, &n, f.pool, f.pool.BlockAt(1), &b)
	}
	// A record imported from Calico: its ID is not network.container.ifname.
	imp := handle("node-a", "imported")
	imp.ID, imp.Network, imp.IfName = "k8s-pod-network.imported", "k8s-pod-network", "eth0"
	assign(t, &n, families[0].pool, families[0].pool.BlockAt(1), &imp)
	// A record whose attachment has no network name.
	bare := handle("node-a", "bare")
	bare.ID, bare.Network, bare.NetNS, bare.Namespace, bare.Pod, bare.PodUID = "bare", "", "", "", "", ""
	bare.Created = bare.Created.In(time.FixedZone("X", 3600))
	assign(t, &n, families[1].pool, families[1].pool.BlockAt(1), &bare)
	// A second IPv4 block, full.
	full := blockOf(families[0].pool, 2, "node-a")
	n.Blocks = append(n.Blocks, full)
	for i := range full.Size() {
		h := handle("node-a", fmt.Sprintf("full%02d", i))
		assign(t, &n, families[0].pool, full.CIDR, &h)
		n.Handles = append(n.Handles, h)
		if nb, _ := n.Block(store.BlockRef{Pool: full.Pool, CIDR: full.CIDR}); len(nb.Free) == 0 {
			break
		}
	}
	n.Handles = append(n.Handles, b, imp, bare)
	// Two of the node's handles hold addresses in other nodes' blocks.
	n.Loans = []store.Loan{{Handle: imp.ID, Lender: "node-c"}, {Handle: "net1.elsewhere.eth0", Lender: strings.Repeat("l", store.MaxNameBytes)}}

	created, err := s.CreateNode(ctx, n)
	noErr(t, err, "CreateNode")
	if created.Version == "" {
		t.Fatal("CreateNode returned no version")
	}
	sameNode(t, created, n, "CreateNode's result")
	got, err := s.GetNode(ctx, n.Name)
	noErr(t, err, "GetNode")
	if got.Version != created.Version {
		t.Fatalf("GetNode version %q, CreateNode returned %q", got.Version, created.Version)
	}
	sameNode(t, got, n, "GetNode")
}

func testNodeLifecycle(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, err := s.GetNode(ctx, "node-a")
	wantErr(t, err, store.ErrNotFound, "GetNode before create")
	n := DualStackNode(t, "node-a", 2)
	created, err := s.CreateNode(ctx, n)
	noErr(t, err, "CreateNode")
	_, err = s.CreateNode(ctx, n)
	wantNoConflict(t, err, store.ErrExists, "second CreateNode")

	next := clone(created)
	h := handle("node-a", "next")
	for _, f := range families {
		assign(t, &next, f.pool, f.pool.BlockAt(1), &h)
	}
	next.Handles = append(slices.Clone(next.Handles), h)
	updated, err := s.UpdateNode(ctx, next)
	noErr(t, err, "UpdateNode at the current version")
	if updated.Version == "" || updated.Version == created.Version {
		t.Fatalf("UpdateNode version %q (was %q): want a new one", updated.Version, created.Version)
	}
	sameNode(t, updated, next, "UpdateNode's result")

	// A writer that read the object before this update must fail, and
	// change nothing: this is what keeps an address from two owners.
	racer := clone(created)
	r := handle("node-a", "racer")
	for _, f := range families {
		assign(t, &racer, f.pool, f.pool.BlockAt(1), &r)
	}
	racer.Handles = append(slices.Clone(racer.Handles), r)
	_, err = s.UpdateNode(ctx, racer)
	wantErr(t, err, store.ErrConflict, "UpdateNode at a stale version")
	wantErr(t, s.DeleteNode(ctx, created), store.ErrConflict, "DeleteNode at a stale version")
	got, err := s.GetNode(ctx, "node-a")
	noErr(t, err, "GetNode")
	if got.Version != updated.Version {
		t.Fatalf("version %q after refused writes, want %q", got.Version, updated.Version)
	}
	sameNode(t, got, next, "GetNode after refused writes")

	noErr(t, s.DeleteNode(ctx, updated), "DeleteNode")
	_, err = s.GetNode(ctx, "node-a")
	wantErr(t, err, store.ErrNotFound, "GetNode after delete")
	_, err = s.UpdateNode(ctx, updated)
	wantNoConflict(t, err, store.ErrNotFound, "UpdateNode of a deleted node object")
	wantNoConflict(t, s.DeleteNode(ctx, updated), store.ErrNotFound, "DeleteNode of a deleted node object")
}

// testNodeVersionAfterRecreate: a version of a deleted object never
// matches the object created again under its name (no ABA).
func testNodeVersionAfterRecreate(t *testing.T, s store.Store) {
	ctx := t.Context()
	n := DualStackNode(t, "node-a", 1)
	first, err := s.CreateNode(ctx, n)
	noErr(t, err, "CreateNode")
	noErr(t, s.DeleteNode(ctx, first), "DeleteNode")
	second, err := s.CreateNode(ctx, n)
	noErr(t, err, "CreateNode again")
	if second.Version == first.Version {
		t.Fatalf("recreated object has its predecessor's version %q", first.Version)
	}
	_, err = s.UpdateNode(ctx, first)
	wantErr(t, err, store.ErrConflict, "UpdateNode at the deleted object's version")
}

// testNodeUnchangedUpdate: writing an object unchanged still gives it a
// new version, so that a writer that read it before fails — pool removal
// writes holders' objects as a fence that way.
func testNodeUnchangedUpdate(t *testing.T, s store.Store) {
	ctx := t.Context()
	created, err := s.CreateNode(ctx, DualStackNode(t, "node-a", 2))
	noErr(t, err, "CreateNode")
	same, err := s.UpdateNode(ctx, created)
	noErr(t, err, "UpdateNode unchanged")
	if same.Version == created.Version {
		t.Fatalf("an unchanged update kept version %q", same.Version)
	}
	_, err = s.UpdateNode(ctx, created)
	wantErr(t, err, store.ErrConflict, "UpdateNode at the version before the unchanged update")
	p, err := s.CreatePool(ctx, store.Pool{Spec: families[0].pool})
	noErr(t, err, "CreatePool")
	p2, err := s.UpdatePool(ctx, p)
	noErr(t, err, "UpdatePool unchanged")
	if p2.Version == p.Version {
		t.Fatalf("an unchanged pool update kept version %q", p.Version)
	}
}

// testNodeUpdateWhole: UpdateNode stores n whole at n.Version, also an
// n read at an older version: an object read before another writer's
// update, changed, and given the current version (as a node's
// credentials can rewrite its object) reads back as written, without the
// other writer's record — a backend that writes what changed must not
// take what n was read at for the state at n.Version.
func testNodeUpdateWhole(t *testing.T, s store.Store) {
	ctx := t.Context()
	created, err := s.CreateNode(ctx, DualStackNode(t, "node-a", 2))
	noErr(t, err, "CreateNode")
	other := clone(created)
	b := handle("node-a", "other")
	for _, f := range families {
		assign(t, &other, f.pool, f.pool.BlockAt(1), &b)
	}
	other.Handles = append(other.Handles, b)
	current, err := s.UpdateNode(ctx, other)
	noErr(t, err, "UpdateNode")
	// The same addresses, for another record, in the object as read
	// before that update.
	over := clone(created)
	c := handle("node-a", "over")
	for _, f := range families {
		assign(t, &over, f.pool, f.pool.BlockAt(1), &c)
	}
	over.Handles = append(over.Handles, c)
	if c.IPs[0] != b.IPs[0] {
		t.Fatalf("the two records hold %v and %v, want the same addresses", b.IPs, c.IPs)
	}
	over.Version = current.Version
	written, err := s.UpdateNode(ctx, over)
	noErr(t, err, "UpdateNode of an object read at an older version, at the current one")
	sameNode(t, written, over, "UpdateNode's result")
	got, err := s.GetNode(ctx, "node-a")
	noErr(t, err, "GetNode")
	if got.Version != written.Version {
		t.Fatalf("GetNode version %q, UpdateNode returned %q", got.Version, written.Version)
	}
	sameNode(t, got, over, "GetNode")
}

// testNodeNames: node names that are no Kubernetes object name, and names
// that map to similar ones, are distinct objects.
func testNodeNames(t *testing.T, s store.Store) {
	ctx := t.Context()
	long := strings.Repeat("n", store.MaxNameBytes)
	names := []string{"Node_1", "node-1", "node--1", "node.1", "NODE-1", long, long[:store.MaxNameBytes-1] + "x", "host:8080", "ünï"}
	for i, name := range names {
		_, err := s.CreateNode(ctx, dualStackNodeAt(t, name, i%3, uint64(i+1)))
		noErr(t, err, "CreateNode "+name)
	}
	for i, name := range names {
		got, err := s.GetNode(ctx, name)
		noErr(t, err, "GetNode "+name)
		sameNode(t, got, dualStackNodeAt(t, name, i%3, uint64(i+1)), "GetNode "+name)
	}
	all, err := s.ListNodes(ctx, store.NodeSelector{})
	noErr(t, err, "ListNodes")
	var listed []string
	for _, n := range all {
		listed = append(listed, n.Name)
	}
	if want := slices.Sorted(slices.Values(names)); !slices.Equal(listed, want) {
		t.Fatalf("ListNodes = %q, want %q", listed, want)
	}
}

// testNodeInvalid: a node object whose blocks and records disagree is
// refused with ErrInvalid before anything is written.
func testNodeInvalid(t *testing.T, s store.Store) {
	ctx := t.Context()
	good := DualStackNode(t, "node-a", 2)
	cases := []struct {
		name string
		edit func(n *store.Node)
	}{
		{"address held by two records", func(n *store.Node) {
			h := n.Handles[0]
			h.ID = "net1.other.eth0"
			h.ContainerID = "other"
			n.Handles = append(n.Handles, h)
		}},
		{"owner without a record", func(n *store.Node) { n.Handles = n.Handles[1:] }},
		{"record outside the object's blocks", func(n *store.Node) {
			n.Handles[0].IPs[0].Addr = netip.MustParseAddr("192.0.2.1")
		}},
		{"block of another node", func(n *store.Node) { n.Blocks[0].Node = "node-b" }},
		{"free and owned", func(n *store.Node) { n.Blocks[0].Free = append(n.Blocks[0].Free, ownedOrdinal(n.Blocks[0])) }},
		{"record without addresses", func(n *store.Node) {
			n.Handles = append(n.Handles, handle("node-a", "empty"))
		}},
		{"same block twice", func(n *store.Node) { n.Blocks = append(n.Blocks, n.Blocks[0]) }},
		{"loan from itself", func(n *store.Node) { n.Loans = []store.Loan{{Handle: "net1.x.eth0", Lender: "node-a"}} }},
		{"loan twice", func(n *store.Node) {
			n.Loans = []store.Loan{{Handle: "net1.x.eth0", Lender: "node-b"}, {Handle: "net1.x.eth0", Lender: "node-b"}}
		}},
	}
	for _, c := range cases {
		n := clone(good)
		c.edit(&n)
		_, err := s.CreateNode(ctx, n)
		wantErr(t, err, store.ErrInvalid, "CreateNode with "+c.name)
	}
	_, err := s.GetNode(ctx, "node-a")
	wantErr(t, err, store.ErrNotFound, "GetNode after refused creates")
	created, err := s.CreateNode(ctx, good)
	noErr(t, err, "CreateNode")
	for _, c := range cases {
		n := clone(created)
		c.edit(&n)
		_, err := s.UpdateNode(ctx, n)
		wantErr(t, err, store.ErrInvalid, "UpdateNode with "+c.name)
	}
	got, err := s.GetNode(ctx, "node-a")
	noErr(t, err, "GetNode")
	if got.Version != created.Version {
		t.Fatalf("refused updates changed the version: %q, want %q", got.Version, created.Version)
	}
	sameNode(t, got, good, "GetNode after refused updates")
}

func ownedOrdinal(b ipam.Block) int {
	for ord := range b.Owners {
		return ord
	}
	panic("block without owners")
}

// clone deep-copies a node object so that edits leave the original alone.
func clone(n store.Node) store.Node {
	c := n
	c.Blocks = make([]ipam.Block, len(n.Blocks))
	for i, b := range n.Blocks {
		b.Free = slices.Clone(b.Free)
		owners := make(map[int]string, len(b.Owners))
		for k, v := range b.Owners {
			owners[k] = v
		}
		b.Owners = owners
		c.Blocks[i] = b
	}
	c.Handles = make([]ipam.Handle, len(n.Handles))
	for i, h := range n.Handles {
		h.IPs = slices.Clone(h.IPs)
		c.Handles[i] = h
	}
	c.Loans = slices.Clone(n.Loans)
	return c
}
