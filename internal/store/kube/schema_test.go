package kube

import (
	"encoding/json"
	"errors"
	"maps"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// TestSchemaKeepsEverySpecField: what the API server stores (GET as the
// admin, raw) is exactly the spec the backend sent — no field pruned by
// the CRD's structural schema, none added — for a full dual-stack node
// object (its IPAMNode and its blocks' states), a claim and pools with
// every field set.
func TestSchemaKeepsEverySpecField(t *testing.T) {
	st := openStore(t)
	admin := openAdmin(t, st.Prefix())
	ctx := ctxT(t)
	n := dualStackNode(t, "node-a", "node-b")
	if n.Handles[0].ID == n.Handles[1].ID {
		t.Fatal("fixture")
	}
	if _, err := st.CreateNode(ctx, claimed(t, st, n)); err != nil {
		t.Fatal(err)
	}
	spec, err := store.EncodeNode(n)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Handles[0].Attachment != nil || spec.Handles[1].Attachment == nil || spec.Handles[2].Node == "" || len(spec.Loans) == 0 {
		t.Fatal("fixture: want an attachment-less handle, one with an attachment, a borrowed record and a loan")
	}
	sent, _ := json.Marshal(headSpec{Node: n.Name, Loans: spec.Loans})
	checkStored(t, admin, kindNode, st.names.object(n.Name), sent)
	for _, b := range n.Blocks {
		ref := store.BlockRef{Pool: b.Pool, CIDR: b.CIDR}
		// A create writes the records in the order of their IDs.
		bc, err := st.blockContent(n, ref, fragments(n.Normalized(), []store.BlockRef{ref})[ref])
		if err != nil {
			t.Fatal(err)
		}
		checkStored(t, admin, kindBlock, bc.name, bc.spec)
	}

	c := store.Claim{BlockRef: store.BlockRef{Pool: pool6.Name, CIDR: netip.MustParsePrefix("fd00:22::80/122")}, Node: "node-a"}
	if _, err := st.CreateClaim(ctx, c); err != nil {
		t.Fatal(err)
	}
	cs, _ := store.EncodeClaim(c)
	sent, _ = json.Marshal(cs)
	checkStored(t, admin, kindBlock, st.names.claim(c.Pool, c.CIDR), sent)

	for _, p := range []store.Pool{{Spec: pool4}, {Spec: pool6}} {
		if _, err := st.CreatePool(ctx, p); err != nil {
			t.Fatal(err)
		}
		sent, _ := store.MarshalPool(p)
		checkStored(t, admin, kindPool, st.names.object(p.Spec.Name), sent)
	}
}

// checkStored GETs the object as the admin and compares its spec with
// sent, as JSON values.
func checkStored(t *testing.T, admin *Store, k kind, name string, sent []byte) {
	t.Helper()
	o, err := admin.get(ctxT(t), k, name)
	if err != nil {
		t.Fatal(err)
	}
	var got, want any
	if err := json.Unmarshal(o.Spec, &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(sent, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s stored spec:\n  %s\nsent:\n  %s", what(k, name), o.Spec, sent)
	}
}

// TestSchemaRefusesMalformed: objects written as the admin (as by kubectl
// apply or edit) that the codec would never write are refused by the API
// server with a message naming the field, or, when the schema cannot tell
// (a free queue in the right syntax but wrong, an unmasked block inside a
// node object), stored — and then read as store.ErrCorrupt.
func TestSchemaRefusesMalformed(t *testing.T) {
	st := openStore(t)
	admin := openAdmin(t, st.Prefix())
	ctx := ctxT(t)
	good := dualStackNode(t, "node-a", "node-b")
	spec, _ := store.EncodeNode(good)
	nodeSpec := func(edit func(w *wholeWire)) []byte {
		w := wholeOf("node-a", spec)
		b, _ := json.Marshal(w)
		var cp wholeWire
		_ = json.Unmarshal(b, &cp)
		edit(&cp)
		b, _ = json.Marshal(cp)
		return b
	}
	refused := []struct {
		name string
		k    kind
		spec string
		want string // in the API's message
	}{
		{"claim, bad CIDR", kindBlock, `{"pool":"blue","cidr":"10.0.0.300/26","node":"n"}`, "spec.cidr"},
		{"claim, host bits", kindBlock, `{"pool":"blue","cidr":"10.0.0.1/26","node":"n"}`, "masked"},
		{"claim, no node", kindBlock, `{"pool":"blue","cidr":"10.0.0.0/26"}`, "spec.node"},
		{"pool, bad gateway", kindPool, `{"name":"p","cidr":"10.0.0.0/16","blockSize":26,"gateway":"10.0.0"}`, "spec.gateway"},
		{"pool, block size a string", kindPool, `{"name":"p","cidr":"10.0.0.0/16","blockSize":"26"}`, "spec.blockSize"},
		{"node, bad free queue syntax", kindNode, `{"node":"n","blocks":[{"pool":"p","cidr":"10.0.0.0/26","free":"0-x"}],"records":[]}`, "free"},
		{"node, record not a string", kindNode, `{"node":"n","blocks":[],"records":[{"id":"a.b.c"}]}`, "records"},
		{"block, bad free queue syntax", kindBlock, `{"pool":"blue","cidr":"10.0.0.0/26","node":"n","state":{"free":"0-x","records":{}}}`, "free"},
		{"block, state without records", kindBlock, `{"pool":"blue","cidr":"10.0.0.0/26","node":"n","state":{"free":"0-63"}}`, "records"},
		{"block, record not a string", kindBlock, `{"pool":"blue","cidr":"10.0.0.0/26","node":"n","state":{"free":"1-63","records":{"a.b.c":{"ips":"10.0.0.1@blue"}}}}`, "records"},
		{"block, records a list", kindBlock, `{"pool":"blue","cidr":"10.0.0.0/26","node":"n","state":{"free":"1-63","records":["a.b.c 10.0.0.1@blue"]}}`, "records"},
		// Objects written before records were strings keep the old schema.
		{"node, old form, bad address", kindNode, `{"node":"n","blocks":[],"records":[],"handles":[{"id":"a.b.c","ips":[{"addr":"10.0.0.256","pool":"p"}]}]}`, "addr"},
		{"node, old form, attachment of two", kindNode, `{"node":"n","blocks":[],"records":[],"handles":[{"id":"x","attachment":["a","b"],"ips":[{"addr":"10.0.0.1","pool":"p"}]}]}`, "attachment"},
		{"node, old form, bad created", kindNode, `{"node":"n","blocks":[],"records":[],"handles":[{"id":"a.b.c","created":"yesterday","ips":[{"addr":"10.0.0.1","pool":"p"}]}]}`, "created"},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			name := admin.names.object("bad")
			body, err := admin.newObject(c.k, name, nil, []byte(c.spec), "")
			if err != nil {
				t.Fatal(err)
			}
			_, err = admin.create(ctx, c.k, name, body)
			if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("admin create of %s: %v; want ErrInvalid naming %q", c.name, err, c.want)
			}
		})
	}
	// Stored, but corrupt: the backend reports ErrCorrupt naming the
	// object. A block's state edited:
	blockCorrupt(t, st, admin)
	// An IPAMNode in the v1alpha1 form, which the first read converts:
	for _, c := range []struct {
		name string
		spec []byte
		want string
	}{
		{"free queue with a run that does not ascend", nodeSpec(func(w *wholeWire) { w.Blocks[0].Free = "5-2" }), "does not ascend"},
		{"free queue missing an ordinal", nodeSpec(func(w *wholeWire) { w.Blocks[0].Free = "0-5" }), "want 64 in all"},
		{"unmasked block", nodeSpec(func(w *wholeWire) { w.Blocks[0].CIDR = netip.PrefixFrom(netip.MustParseAddr("10.0.0.65"), 26) }), "not a masked prefix"},
		{"record that does not parse", nodeSpec(func(w *wholeWire) { w.Records[0] = "a.b.c 10.0.0.1" }), "want <addr>@<pool>"},
		{"record with a key out of order", nodeSpec(func(w *wholeWire) { w.Records[0] += " node=x" }), "in that order"},
		{"records and handles both", nodeSpec(func(w *wholeWire) { w.Handles = []store.HandleSpec{spec.Handles[0]} }), "both records and handles"},
		{"record dropped, its address still taken", nodeSpec(func(w *wholeWire) { w.Records = w.Records[1:] }), "node-a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := admin.names.object("node-a")
			body, _ := admin.newObject(kindNode, name, nil, c.spec, "")
			if _, err := admin.create(ctx, kindNode, name, body); err != nil {
				t.Fatalf("admin create: %v", err)
			}
			defer func() {
				o, err := admin.get(ctx, kindNode, name)
				if err == nil {
					_ = admin.del(ctx, kindNode, name, store.Version(o.Metadata.ResourceVersion))
				}
			}()
			_, err := st.GetNode(ctx, "node-a")
			if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("GetNode of a corrupt object: %v; want ErrCorrupt mentioning %q", err, c.want)
			}
			if _, err := st.ListNodes(ctx, store.NodeSelector{}); !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("ListNodes with a corrupt object: %v; want ErrCorrupt", err)
			}
		})
	}
}

// blockCorrupt: a node object's block whose state an admin edited into
// something the codec never writes is read as ErrCorrupt.
func blockCorrupt(t *testing.T, st, admin *Store) {
	ctx := ctxT(t)
	n, err := st.CreateNode(ctx, claimed(t, st, dualStackNodeIn(t, "node-c", "node-b", 5)))
	if err != nil {
		t.Fatal(err)
	}
	name := st.names.claim(n.Blocks[0].Pool, n.Blocks[0].CIDR)
	o, err := admin.get(ctx, kindBlock, name)
	if err != nil {
		t.Fatal(err)
	}
	var good blockWire
	if err := json.Unmarshal(o.Spec, &good); err != nil {
		t.Fatal(err)
	}
	k1 := recordKey(ipam.HandleID("kindnet", "c0ffee", "eth0"))
	if _, ok := good.State.Records[k1]; !ok {
		t.Fatalf("fixture: no record %q in %v", k1, good.State.Records)
	}
	for _, c := range []struct {
		name string
		edit func(w *blockState)
		want string
	}{
		{"free queue with a run that does not ascend", func(w *blockState) { w.Free = "5-2" }, "does not ascend"},
		{"free queue missing an ordinal", func(w *blockState) { w.Free = "0-5" }, "want 64 in all"},
		{"record that does not parse", func(w *blockState) { w.Records[k1] = "10.0.5.70" }, "want <addr>@<pool>"},
		{"record of an address outside the block", func(w *blockState) { w.Records[k1] = strings.Replace(w.Records[k1], "10.0.5.70", "10.0.6.70", 1) }, "outside the block"},
		{"record dropped, its address still taken", func(w *blockState) { delete(w.Records, k1) }, "node-c"},
	} {
		t.Run("block, "+c.name, func(t *testing.T) {
			w := good
			bs := *good.State
			bs.Records = maps.Clone(bs.Records)
			c.edit(&bs)
			w.State = &bs
			raw, _ := json.Marshal(w)
			cur, err := admin.get(ctx, kindBlock, name)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := admin.newObject(kindBlock, name, cur.Metadata.Labels, raw, store.Version(cur.Metadata.ResourceVersion))
			if _, err := admin.update(ctx, kindBlock, name, body); err != nil {
				t.Fatalf("admin update: %v", err)
			}
			if _, err := st.GetNode(ctx, "node-c"); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("GetNode of a corrupt block: %v; want ErrCorrupt mentioning %q", err, c.want)
			}
			if _, err := st.ListNodes(ctx, store.NodeSelector{}); !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("ListNodes with a corrupt block: %v; want ErrCorrupt", err)
			}
		})
	}
	cur, err := admin.get(ctx, kindBlock, name)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := admin.newObject(kindBlock, name, cur.Metadata.Labels, o.Spec, store.Version(cur.Metadata.ResourceVersion))
	if _, err := admin.update(ctx, kindBlock, name, body); err != nil {
		t.Fatal(err)
	}
}

// TestReadChecksName: an object found under a name's object name but
// holding another name (a hash collision, another partition's object, an
// edited spec) is never returned as that name's.
func TestReadChecksName(t *testing.T) {
	st := openStore(t)
	admin := openAdmin(t, st.Prefix())
	ctx := ctxT(t)
	n := dualStackNode(t, "node-b", "node-c")
	spec, _ := store.EncodeNode(n)
	raw, _ := json.Marshal(wholeOf("node-b", spec))
	body, _ := admin.newObject(kindNode, st.names.object("node-a"), nil, raw, "")
	if _, err := admin.create(ctx, kindNode, st.names.object("node-a"), body); err != nil {
		t.Fatal(err)
	}
	if got, err := st.GetNode(ctx, "node-a"); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), `holds node "node-b"`) {
		t.Fatalf("GetNode(node-a) of an object holding node-b: %+v, %v; want ErrCorrupt", got.Name, err)
	}
	if _, err := st.ListNodes(ctx, store.NodeSelector{}); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("ListNodes with node-b's object under node-a's name: %v; want ErrCorrupt", err)
	}
	p := pool4
	p.Name = "blue2"
	praw, _ := store.MarshalPool(store.Pool{Spec: p})
	body, _ = admin.newObject(kindPool, st.names.object("blue"), nil, praw, "")
	if _, err := admin.create(ctx, kindPool, st.names.object("blue"), body); err != nil {
		t.Fatal(err)
	}
	if got, err := st.GetPool(ctx, "blue"); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("GetPool(blue) of an object holding blue2: %+v, %v; want ErrCorrupt", got.Spec.Name, err)
	}
	c := store.Claim{BlockRef: store.BlockRef{Pool: "blue", CIDR: netip.MustParsePrefix("10.0.0.0/26")}, Node: "node-a"}
	craw, _ := json.Marshal(store.ClaimSpec{Pool: "blue", CIDR: netip.MustParsePrefix("10.0.0.64/26"), Node: "node-a"})
	body, _ = admin.newObject(kindBlock, st.names.claim(c.Pool, c.CIDR), nil, craw, "")
	if _, err := admin.create(ctx, kindBlock, st.names.claim(c.Pool, c.CIDR), body); err != nil {
		t.Fatal(err)
	}
	if got, err := st.GetClaim(ctx, c.BlockRef); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("GetClaim of an object holding another block: %+v, %v; want ErrCorrupt", got, err)
	}
	if _, err := st.ListClaims(ctx, store.ClaimSelector{}); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("ListClaims with a claim under another block's name: %v; want ErrCorrupt", err)
	}
}

// TestOtherPartitionNotRead: an unprefixed store's pool "<prefix>.blue"
// has the object name of pool "blue" of the store with that prefix; the
// prefixed store does not take it for its own.
func TestOtherPartitionNotRead(t *testing.T) {
	st := openStore(t)
	plain := openAdmin(t, "")
	ctx := ctxT(t)
	p := pool4
	p.Name = st.Prefix() + ".blue"
	if _, err := plain.CreatePool(ctx, store.Pool{Spec: p}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if got, err := plain.GetPool(ctx, p.Name); err == nil {
			_ = plain.DeletePool(ctx, got)
		}
	}()
	if got, err := st.GetPool(ctx, "blue"); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "partition") {
		t.Fatalf("GetPool(blue) in partition %s of the unprefixed store's %q: %+v, %v; want ErrCorrupt naming the partition", st.Prefix(), p.Name, got.Spec.Name, err)
	}
	if got, err := st.ListPools(ctx); err != nil || len(got) != 0 {
		t.Fatalf("ListPools in partition %s: %+v, %v; want none", st.Prefix(), got, err)
	}
}
