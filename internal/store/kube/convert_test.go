package kube

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// writeWhole stores node object n as v1alpha1 code did: the whole object
// in its IPAMNode (records as strings, or as JSON objects under "handles"
// before that), labelled lends.ipkeeper.io/<borrower>, and a claim (an
// IPAMBlock without state) for its blocks but the last, which the old
// form could hold unclaimed.
func writeWhole(t *testing.T, admin *Store, n store.Node, jsonHandles bool) {
	t.Helper()
	ctx := ctxT(t)
	spec, err := store.EncodeNode(n)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(wholeOf(n.Name, spec))
	if jsonHandles {
		raw, _ = json.Marshal(struct {
			Node string `json:"node"`
			store.NodeSpec
		}{n.Name, spec})
		raw = []byte(strings.Replace(string(raw), `"handles":`, `"records":[],"handles":`, 1))
	}
	labels := map[string]string{}
	for _, b := range n.LendsTo() {
		labels[LendsPrefix+labelValue(b)] = ""
	}
	name := admin.names.object(n.Name)
	body, _ := admin.newObject(kindNode, name, labels, raw, "")
	if _, err := admin.create(ctx, kindNode, name, body); err != nil {
		t.Fatal(err)
	}
	for _, b := range n.Blocks[:len(n.Blocks)-1] {
		if _, err := admin.CreateClaim(ctx, store.Claim{BlockRef: store.BlockRef{Pool: b.Pool, CIDR: b.CIDR}, Node: n.Name}); err != nil {
			t.Fatal(err)
		}
	}
}

// converted fails unless node object want is stored in parts: its
// IPAMNode the head only, each block's state in its IPAMBlock; and reads
// back as want.
func converted(t *testing.T, st, admin *Store, want store.Node) store.Node {
	t.Helper()
	ctx := ctxT(t)
	got, err := st.GetNode(ctx, want.Name)
	if err != nil {
		t.Fatal(err)
	}
	sameNode(t, got, want)
	o, err := admin.get(ctx, kindNode, admin.names.object(want.Name))
	if err != nil {
		t.Fatal(err)
	}
	var w headWire
	if err := json.Unmarshal(o.Spec, &w); err != nil {
		t.Fatal(err)
	}
	if w.whole() || len(w.Loans) != len(want.Loans) {
		t.Fatalf("IPAMNode after the read: %s; want the head only", o.Spec)
	}
	for _, b := range want.Blocks {
		o, err := admin.get(ctx, kindBlock, admin.names.claim(b.Pool, b.CIDR))
		if err != nil {
			t.Fatal(err)
		}
		sb, err := admin.decodeBlock(o, &store.BlockRef{Pool: b.Pool, CIDR: b.CIDR})
		if err != nil || sb.state == nil || sb.claim.Node != want.Name || sb.state.Free != store.FormatQueue(b.Free) {
			t.Fatalf("IPAMBlock of %s after the read: %s, %v; want node %s's state", b.CIDR, o.Spec, err, want.Name)
		}
	}
	return got
}

// TestConvertWholeNode: IPAMNodes written in the v1alpha1 form (records
// as strings, and the earlier JSON handles) are converted by the first
// read — GetNode, ListNodes, ListNodes{LendsTo} — into the head and the
// blocks' states, read back as the same node object, and allocated from.
func TestConvertWholeNode(t *testing.T) {
	st := openStore(t)
	admin := openAdmin(t, st.Prefix())
	ctx := ctxT(t)
	nodes := []store.Node{dualStackNodeIn(t, "node-a", "node-b", 0), dualStackNodeIn(t, "node-c", "node-b", 1), dualStackNodeIn(t, "node-d", "node-e", 2)}
	for i, n := range nodes {
		writeWhole(t, admin, n, i == 1)
	}
	// By GetNode.
	got := converted(t, st, admin, nodes[0])
	// By a list of the lenders of node-b: node-c.
	lenders, err := st.ListNodes(ctx, store.NodeSelector{LendsTo: "node-b"})
	if err != nil || len(lenders) != 2 {
		t.Fatalf("lenders of node-b: %d, %v; want node-a and node-c", len(lenders), err)
	}
	converted(t, st, admin, nodes[1])
	// By a list of all.
	all, err := st.ListNodes(ctx, store.NodeSelector{})
	if err != nil || len(all) != 3 {
		t.Fatalf("ListNodes: %d, %v; want 3", len(all), err)
	}
	converted(t, st, admin, nodes[2])
	// Allocated from: an address of each family for a new handle.
	next := got
	h := next.Handles[0]
	h.ID, h.ContainerID, h.IPs = "kindnet.d00d.eth0", "d00d", nil
	next.Blocks = append(next.Blocks[:0:0], next.Blocks...)
	for i, p := range []struct{ pool, addr string }{{pool4.Name, "10.0.0.72"}, {pool6.Name, "fd00:22::42"}} {
		pool := pool4
		if i == 1 {
			pool = pool6
		}
		a := mustAddr(t, p.addr)
		nb, err := next.Blocks[i].AssignAddr(pool, a, h.ID)
		if err != nil {
			t.Fatal(err)
		}
		next.Blocks[i] = nb
		h.IPs = append(h.IPs, ipamIP(a, p.pool, nb.CIDR))
	}
	next.Handles = append(append(next.Handles[:0:0], next.Handles...), h)
	written, err := st.UpdateNode(ctx, next)
	if err != nil {
		t.Fatalf("allocating in a converted node object: %v", err)
	}
	back, err := st.GetNode(ctx, "node-a")
	if err != nil || back.Version != written.Version {
		t.Fatalf("read back at %q, %v; want %q", back.Version, err, written.Version)
	}
	sameNode(t, back, written)
}

// TestConvertKilled: a conversion killed after each of its writes (the
// blocks' states, then the head) is done again by the next read, which
// converges to the node object the IPAMNode held; until then the
// IPAMNode is the truth.
func TestConvertKilled(t *testing.T) {
	n := dualStackNode(t, "node-a", "node-b")
	for after := int64(0); ; after++ {
		if after > 5 {
			t.Fatal("the conversion kept writing past 5 writes")
		}
		st, kt := openKillable(t)
		admin := openAdmin(t, st.Prefix())
		writeWhole(t, admin, n, false)
		kt.kill(after)
		_, err := st.GetNode(ctxT(t), n.Name)
		kt.kill(-1)
		if err == nil {
			t.Logf("%d conversion writes", after)
			if after == 0 {
				t.Fatal("a conversion that writes nothing")
			}
			converted(t, st, admin, n)
			return
		}
		if !errors.Is(err, errKilled) {
			t.Fatalf("killed after write %d: %v", after, err)
		}
		converted(t, st, admin, n)
	}
}

// TestConvertOvertaken: a conversion that read the v1alpha1 IPAMNode,
// then was overtaken — another conversion finished and the node wrote a
// block since — fails with ErrConflict and does not write that block's
// state over.
func TestConvertOvertaken(t *testing.T) {
	st := openStore(t)
	admin := openAdmin(t, st.Prefix())
	ctx := ctxT(t)
	n := dualStackNode(t, "node-a", "node-b")
	writeWhole(t, admin, n, false)
	old, err := admin.get(ctx, kindNode, admin.names.object(n.Name))
	if err != nil {
		t.Fatal(err)
	}
	got := converted(t, st, admin, n)
	// The borrower's address in the IPv6 block released.
	next := got
	b6, err := next.Blocks[1].Release(next.Handles[2].IPs[0].Addr, next.Handles[2].ID)
	if err != nil {
		t.Fatal(err)
	}
	next.Blocks = []ipam.Block{next.Blocks[0], b6}
	next.Handles = next.Handles[:2]
	written, err := st.UpdateNode(ctx, next)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.convert(ctx, n.Name, old); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("the overtaken conversion: %v; want ErrConflict", err)
	}
	back, err := st.GetNode(ctx, n.Name)
	if err != nil {
		t.Fatal(err)
	}
	written.Version = ""
	sameNode(t, back, written)
}
