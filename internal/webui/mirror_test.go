package webui

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
)

// nodeFeed writes node objects into a model as watch events, for pure
// tests of the mirror: it keeps every object's handle records and sends
// the whole object (its blocks' owners derived from the records) at a new
// revision on every change.
type nodeFeed struct {
	m    *model
	rev  int64
	objs map[string]map[string]ipam.Handle // object -> handle ID -> record
	at   map[string]string                 // handle ID -> object
}

func newNodeFeed(m *model) *nodeFeed {
	return &nodeFeed{m: m, objs: map[string]map[string]ipam.Handle{}, at: map[string]string{}}
}

// put writes h's record into object obj (moving it out of the object that
// held it before).
func (f *nodeFeed) put(obj string, h ipam.Handle) {
	if prev, ok := f.at[h.ID]; ok && prev != obj {
		f.del(h.ID)
	}
	if f.objs[obj] == nil {
		f.objs[obj] = map[string]ipam.Handle{}
	}
	f.objs[obj][h.ID] = h
	f.at[h.ID] = obj
	f.write(obj)
}

// del removes handle id's record.
func (f *nodeFeed) del(id string) {
	obj := f.at[id]
	delete(f.objs[obj], id)
	delete(f.at, id)
	f.write(obj)
}

// node is object obj as stored at version v.
func (f *nodeFeed) node(obj string, v int64) store.Node {
	n := store.Node{Name: obj, Version: store.Version(strconv.FormatInt(v, 10))}
	blocks := map[store.BlockRef]*ipam.Block{}
	for _, id := range slices.Sorted(mapKeys(f.objs[obj])) {
		h := f.objs[obj][id]
		n.Handles = append(n.Handles, h)
		for _, ip := range h.IPs {
			ref := store.BlockRef{Pool: ip.Pool, CIDR: ip.Block}
			b := blocks[ref]
			if b == nil {
				b = &ipam.Block{CIDR: ip.Block, Pool: ip.Pool, Node: obj, Owners: map[int]string{}}
				blocks[ref] = b
			}
			ord, _ := b.Ordinal(ip.Addr)
			b.Owners[ord] = id
		}
	}
	for _, ref := range slices.SortedFunc(mapKeys(blocks), store.BlockRef.Compare) {
		n.Blocks = append(n.Blocks, *blocks[ref])
	}
	return n
}

func (f *nodeFeed) write(obj string) {
	f.rev++
	f.m.apply(f.rev, []kvbacked.Event{{Kind: kvbacked.KindNode, Rev: f.rev, Node: f.node(obj, f.rev)}})
}

// TestModelReplace: a full read applies what changed and removes what is
// gone; node objects at the version the mirror holds are not decoded
// again; an unreadable node object is counted (and not read again at the
// same version) while the others are shown; a claim without block state
// shows its block claimed and empty; a dual-stack handle with a record in
// a lender's object is one handle with both addresses; replayed watch
// events older than the mirror change nothing.
func TestModelReplace(t *testing.T) {
	m := newModel(slog.New(slog.DiscardHandler))
	v4blk := poolTiny.CIDR
	v6blk := netip.MustParsePrefix("fd00:10::/122")
	web := ipam.Handle{ID: "net.web.eth0", Node: "node-b", Namespace: "default", Pod: "web", IPs: []ipam.HandleIP{
		{Addr: netip.MustParseAddr("fd00:10::1"), Pool: poolV6.Name, Block: v6blk}}}
	webLent := web
	webLent.IPs = []ipam.HandleIP{{Addr: netip.MustParseAddr("10.30.0.2"), Pool: poolTiny.Name, Block: v4blk}}
	own := ipam.Handle{ID: "net.own.eth0", Node: "node-a", Namespace: "default", Pod: "own", IPs: []ipam.HandleIP{
		{Addr: netip.MustParseAddr("10.30.0.1"), Pool: poolTiny.Name, Block: v4blk}}}
	f := newNodeFeed(m)
	f.objs["node-a"] = map[string]ipam.Handle{own.ID: own, web.ID: webLent}
	f.objs["node-b"] = map[string]ipam.Handle{web.ID: web}
	a, b := f.node("node-a", 3), f.node("node-b", 4)
	pools := []store.Pool{{Spec: poolTiny, Version: "1"}, {Spec: poolV6, Version: "2"}}
	orphanRef := store.BlockRef{Pool: poolV6.Name, CIDR: netip.MustParsePrefix("fd00:10::40/122")}
	claims := []store.Claim{{BlockRef: store.BlockRef{Pool: poolTiny.Name, CIDR: v4blk}, Node: "node-a", Version: "3"},
		{BlockRef: store.BlockRef{Pool: poolV6.Name, CIDR: v6blk}, Node: "node-b", Version: "4"},
		{BlockRef: orphanRef, Node: "node-c", Version: "5"}}
	corrupt := fmt.Errorf("%w: node object %q: truncated", store.ErrCorrupt, "node-x")
	m.replace(snapshot{rev: 6, pools: pools, claims: claims, nodes: []kvbacked.ScannedNode{
		{Name: "node-a", Version: a.Version, Node: a, Decoded: true},
		{Name: "node-b", Version: b.Version, Node: b, Decoded: true},
		{Name: "node-x", Version: "6", Err: corrupt}}})

	tiny := m.blocks[store.BlockRef{Pool: poolTiny.Name, CIDR: v4blk}]
	if tiny == nil || tiny.b.Node != "node-a" || tiny.agg.inUse != 2 || tiny.agg.borrowed != 1 || tiny.agg.borrowers["node-b"] != 1 {
		t.Fatalf("node-a's block lending to node-b: %+v", tiny)
	}
	if h := m.handles[web.ID]; h == nil || len(h.ips) != 2 || m.podCount["node-b"] != 1 || m.podCount["node-a"] != 1 {
		t.Fatalf("the split handle: %+v, pods per node %v", h, m.podCount)
	}
	u := &UI{m: m}
	hs, _, _ := u.Handles()
	if len(hs) != 2 {
		t.Fatalf("Handles: %d, want 2 (one per handle ID)", len(hs))
	}
	if o := m.blocks[orphanRef]; o == nil || o.b.Node != "node-c" || o.agg.inUse != 0 || o.holder != "" {
		t.Fatalf("a claim without block state: %+v", o)
	}
	if len(m.bad) != 1 || m.bad[nodeWhat("node-x")] == "" || m.rev != 6 {
		t.Fatalf("after the first read: bad %v, revision %d", m.bad, m.rev)
	}

	// Read again with nothing decoded (every object at the version the
	// mirror holds, the corrupt one included): nothing changes.
	gen := m.gen
	m.replace(snapshot{rev: 6, pools: pools, claims: claims, nodes: []kvbacked.ScannedNode{
		{Name: "node-a", Version: a.Version}, {Name: "node-b", Version: b.Version}, {Name: "node-x", Version: "6"}}})
	if m.gen != gen || len(m.bad) != 1 || m.blocks[store.BlockRef{Pool: poolTiny.Name, CIDR: v4blk}] != tiny {
		t.Errorf("an unchanged read changed the map: generation %d -> %d, bad %v", gen, m.gen, m.bad)
	}

	// node-b's object and the corrupt one go, node-a's stays.
	m.replace(snapshot{rev: 9, pools: pools, claims: claims[:1], nodes: []kvbacked.ScannedNode{{Name: "node-a", Version: a.Version}}})
	if len(m.bad) != 0 || m.handles[web.ID] == nil || len(m.handles[web.ID].ips) != 1 || m.podCount["node-b"] != 1 ||
		len(m.blocks) != 1 || len(m.byPool) != 1 {
		t.Errorf("after node-b's object went: bad %v, web %+v, blocks %d, byPool %v", m.bad, m.handles[web.ID], len(m.blocks), m.byPool)
	}
	if got := m.blocks[store.BlockRef{Pool: poolTiny.Name, CIDR: v4blk}].agg; got.inUse != 2 || got.borrowed != 1 {
		t.Errorf("node-a's block after node-b's object went: %+v", got)
	}

	// Replayed watch events older than the mirror change nothing; a
	// newer deletion does.
	m.apply(10, []kvbacked.Event{{Kind: kvbacked.KindNode, Rev: 2, Deleted: true, Node: store.Node{Name: "node-a"}},
		{Kind: kvbacked.KindPool, Rev: 1, Err: errors.New("replayed garbage"), Pool: store.Pool{Spec: ipam.Pool{Name: poolTiny.Name}}}})
	if m.nodes["node-a"] == nil || m.pools[poolTiny.Name] == nil || len(m.bad) != 0 || m.rev != 10 {
		t.Errorf("replayed events changed the map: node-a %v, pool %v, bad %v, revision %d", m.nodes["node-a"], m.pools[poolTiny.Name], m.bad, m.rev)
	}
	m.apply(11, []kvbacked.Event{{Kind: kvbacked.KindNode, Rev: 11, Deleted: true, Node: store.Node{Name: "node-a"}}})
	if len(m.handles) != 0 || len(m.podCount) != 0 {
		t.Errorf("after node-a's object was deleted: handles %d, pods %v", len(m.handles), m.podCount)
	}
	if b := m.blocks[store.BlockRef{Pool: poolTiny.Name, CIDR: v4blk}]; b == nil || b.holder != "" || b.agg.inUse != 0 {
		t.Errorf("the claimed block after its holder's object went: %+v", b)
	}
}

// TestReadSnapshotDecodesOnlyChanged: a poll of a real local store decodes
// every node object the first time, none when nothing changed, and only
// the object an allocation wrote after that.
func TestReadSnapshotDecodesOnlyChanged(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := openLocal(t, dir)
	defer st.Close()
	fillFixture(t, st)
	m := newModel(slog.New(slog.DiscardHandler))
	decoded := func() []string {
		t.Helper()
		s, err := readSnapshot(ctx, st, m.nodeVersions())
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, n := range s.nodes {
			if n.Decoded {
				out = append(out, n.Name)
			}
		}
		m.replace(s)
		return out
	}
	if got := decoded(); !slices.Equal(got, []string{"node-a", "node-b"}) {
		t.Fatalf("first read decoded %v", got)
	}
	if got := decoded(); len(got) != 0 {
		t.Fatalf("an unchanged read decoded %v", got)
	}
	a := allocator.New(st, nil)
	if _, err := a.Allocate(ctx, allocator.Request{Handle: ipam.Handle{ID: "net.ctr-more.eth0", Network: "net", ContainerID: "ctr-more",
		IfName: "eth0", Node: "node-b", Pod: "more"}, Sets: [][]string{{"c-v6"}}}); err != nil {
		t.Fatal(err)
	}
	if got := decoded(); !slices.Equal(got, []string{"node-b"}) {
		t.Fatalf("after an ADD on node-b the read decoded %v", got)
	}
	if h := m.handles["net.ctr-more.eth0"]; h == nil || h.node != "node-b" {
		t.Fatalf("the ADD is not in the map: %+v", h)
	}
}

// TestModelHoldsOnlyCurrentRecords: the mirror shows a handle from its
// record in the node object as last put, sharing it; a node object read
// again at a new version with the record unchanged moves the handle to the
// new object's record, so that nothing of the old object stays held (it
// can be collected), and keeps the handle as it was (no change shown).
func TestModelHoldsOnlyCurrentRecords(t *testing.T) {
	m := newModel(slog.New(slog.DiscardHandler))
	f := newNodeFeed(m)
	blk := poolTiny.CIDR
	own := ipam.Handle{ID: "net.own.eth0", Node: "node-a", Namespace: "default", Pod: "own", IPs: []ipam.HandleIP{
		{Addr: netip.MustParseAddr("10.30.0.1"), Pool: poolTiny.Name, Block: blk}}}
	other := ipam.Handle{ID: "net.other.eth0", Node: "node-a", Namespace: "default", Pod: "other", IPs: []ipam.HandleIP{
		{Addr: netip.MustParseAddr("10.30.0.2"), Pool: poolTiny.Name, Block: blk}}}
	f.objs["node-a"] = map[string]ipam.Handle{own.ID: own}
	first := f.node("node-a", 1)
	m.replace(snapshot{rev: 1, pools: []store.Pool{{Spec: poolTiny, Version: "1"}},
		nodes: []kvbacked.ScannedNode{{Name: "node-a", Version: first.Version, Node: first, Decoded: true}}})
	h := m.handles[own.ID]
	if h == nil || h.rec() != &first.Handles[0] {
		t.Fatalf("the handle is not shown from its record in the node object: %+v", h)
	}
	// The object written again: own's record unchanged, another added.
	f.objs["node-a"][other.ID] = other
	second := f.node("node-a", 2)
	m.replace(snapshot{rev: 2, pools: []store.Pool{{Spec: poolTiny, Version: "1"}},
		nodes: []kvbacked.ScannedNode{{Name: "node-a", Version: second.Version, Node: second, Decoded: true}}})
	i := slices.IndexFunc(second.Handles, func(r ipam.Handle) bool { return r.ID == own.ID })
	if m.handles[own.ID] != h {
		t.Error("an unchanged record was put as a new handle")
	}
	if h.rec() != &second.Handles[i] || &h.ips[0] != &second.Handles[i].IPs[0] {
		t.Error("the unchanged handle still holds the old node object's record")
	}
	if m.handles[other.ID] == nil || m.podCount["node-a"] != 2 {
		t.Errorf("the added record: %+v, pods %v", m.handles[other.ID], m.podCount)
	}
}
