package webui

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
	"github.com/ipkeeper/ipkeeper/internal/store/local"
)

// blockInUse is the in-use count the map shows for a block (-1: not
// shown). m.mu must be held.
func (m *model) blockInUse(pool, cidr string) int {
	b := m.blocks[allocator.BlockKey(pool, netip.MustParsePrefix(cidr))]
	if b == nil {
		return -1
	}
	return b.agg.inUse
}

// liveSteps allocates and releases through alloc (opened per step by
// with) and waits for the map to show each step.
func liveSteps(t *testing.T, u *UI, with func(func(a *allocator.Allocator))) {
	t.Helper()
	ctx := context.Background()
	var h ipam.Handle
	with(func(a *allocator.Allocator) {
		var err error
		h, err = a.Allocate(ctx, allocator.Request{Handle: ipam.Handle{ID: "net.ctr-live.eth0", Network: "net",
			ContainerID: "ctr-live", IfName: "eth0", Node: "node-c", Namespace: "default", Pod: "live"}, Sets: [][]string{{"a-v4"}}})
		if err != nil {
			t.Fatal(err)
		}
	})
	blk := h.IPs[0].Block.String()
	if blk != "10.20.0.64/26" {
		t.Fatalf("node-c claimed %s, want the first unclaimed block 10.20.0.64/26", blk)
	}
	waitFor(t, u, "the ADD", func() bool {
		b := u.m.blocks[allocator.BlockKey("a-v4", h.IPs[0].Block)]
		return b != nil && b.b.Node == "node-c" && b.agg.inUse == 1 && u.m.podCount["node-c"] == 1
	})
	// A borrow changes another node's block: node-c has no block of
	// b-tiny and none is left to claim, so it borrows from node-a's.
	with(func(a *allocator.Allocator) {
		if _, err := a.Allocate(ctx, allocator.Request{Handle: ipam.Handle{ID: "net.ctr-live2.eth0", Node: "node-c",
			Network: "net", ContainerID: "ctr-live2", IfName: "eth0"}, Sets: [][]string{{"b-tiny"}}}); err != nil {
			t.Fatal(err)
		}
	})
	waitFor(t, u, "the borrow", func() bool {
		b := u.m.blocks[allocator.BlockKey("b-tiny", netip.MustParsePrefix("10.30.0.0/28"))]
		return b.agg.borrowed == 2 && b.agg.borrowers["node-c"] == 1
	})
	with(func(a *allocator.Allocator) {
		if _, err := a.Release(ctx, h.ID); err != nil {
			t.Fatal(err)
		}
	})
	waitFor(t, u, "the DEL", func() bool {
		return u.m.blockInUse("a-v4", blk) == 0 && u.m.byID[h.ID] == nil && u.m.podCount["node-c"] == 1
	})
}

// TestLocalStoreLive: changes other processes commit to the local file
// show up without any request, and the map holds the file only while it
// reads (the writer never waits long for it).
func TestLocalStoreLive(t *testing.T) {
	dir := t.TempDir()
	writeFixture(t, dir)
	s := startUI(t, localOpts(dir))
	liveSteps(t, s.u, func(f func(a *allocator.Allocator)) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := local.Open(ctx, dir, local.WithLockTimeout(5*time.Second))
		if err != nil {
			t.Fatalf("the map kept the local store locked: %v", err)
		}
		defer st.Close()
		f(allocator.New(st, nil))
	})
}

// TestLocalStoreMissing: a store that was never written is shown empty,
// and looking does not create it.
func TestLocalStoreMissing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "never")
	s := startUI(t, localOpts(dir))
	s.getJSON(t, "/api/pools", 200, &overview{})
	ov := s.getAny(t, "/api/pools", 200).(map[string]any)
	if pools := ov["pools"].([]any); len(pools) != 0 || ov["loaded"] != true || ov["error"] != nil {
		t.Errorf("empty store shown as %v", ov)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the map created %s: %v", dir, err)
	}
}

// TestEtcdLive: with etcd the map reads once and follows the watch.
func TestEtcdLive(t *testing.T) {
	srv := etcdtest.ForTest(t, nil)
	ctx := context.Background()
	ds := config.Datastore{Type: config.DatastoreEtcd, Endpoints: []string{srv.Endpoint}, Prefix: "/webui-live"}
	st, err := etcd.Open(ctx, etcd.Config{Endpoints: ds.Endpoints, Prefix: ds.Prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fillFixture(t, st)
	s := startUI(t, Options{Datastore: ds})
	var ov overview
	s.getJSON(t, "/api/pools", 200, &ov)
	if len(ov.Pools) != 3 || ov.Pools[1].Borrowed != 1 || ov.Pools[0].InUse != 3 {
		t.Fatalf("etcd store shown as %+v", ov.Pools)
	}
	rev, err := st.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ov.Revision != rev {
		t.Errorf("shown at revision %d, the store is at %d", ov.Revision, rev)
	}
	liveSteps(t, s.u, func(f func(a *allocator.Allocator)) { f(allocator.New(st, nil)) })
	// The pool's definition changes (an exclude): every block of the pool
	// is recomputed.
	p := poolV4
	p.Exclude = append(p.Exclude, netip.MustParsePrefix("10.20.0.0/28"))
	if err := st.Txn(ctx, nil, []kv.Op{{Key: allocator.PoolKey(p.Name), Value: allocator.Encode(p)}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, s.u, "the new exclude", func() bool {
		b := s.u.m.blocks[allocator.BlockKey("a-v4", netip.MustParsePrefix("10.20.0.0/26"))]
		return b.agg.reserved == 16 // network, gateway and the rest of 10.20.0.0/28
	})
}

// TestModelReplaceAndBadValues: a full read removes what is gone, skips
// undecodable values (counting them) and counts an owner whose handle is
// missing as an orphan.
func TestModelReplaceAndBadValues(t *testing.T) {
	m := newModel(slog.New(slog.DiscardHandler))
	blk := ipam.NewBlock(poolTiny, poolTiny.CIDR, "node-a")
	blk, _, _ = blk.Assign(poolTiny, "net.gone.eth0")
	blk, _, _ = blk.Assign(poolTiny, "net.here.eth0")
	here := ipam.Handle{ID: "net.here.eth0", Node: "node-b", IPs: []ipam.HandleIP{{Addr: netip.MustParseAddr("10.30.0.2"), Pool: "b-tiny", Block: poolTiny.CIDR}}}
	bkey := allocator.BlockKey("b-tiny", poolTiny.CIDR)
	enc := func(v any) []byte { b, _ := json.Marshal(v); return b }
	m.replace(5, []kv.KeyValue{
		{Key: allocator.PoolKey("b-tiny"), Value: enc(poolTiny), Version: 1},
		{Key: bkey, Value: enc(blk), Version: 2},
		{Key: allocator.HandleKey(here.ID), Value: enc(here), Version: 2},
		{Key: allocator.HandleKey("net.bad.eth0"), Value: []byte("{not json"), Version: 3},
		{Key: "affinity/node-a/b-tiny/10.30.0.0-28", Value: []byte(bkey), Version: 2},
	})
	b := m.blocks[bkey]
	if b.agg.inUse != 2 || b.agg.orphans != 1 || b.agg.borrowed != 1 || len(m.bad) != 1 || len(m.handles) != 1 {
		t.Fatalf("after the first read: agg %+v, bad %v, handles %d", b.agg, m.bad, len(m.handles))
	}
	m.replace(5, []kv.KeyValue{
		{Key: allocator.PoolKey("b-tiny"), Value: enc(poolTiny), Version: 1},
		{Key: bkey, Value: enc(blk), Version: 2},
		{Key: allocator.HandleKey(here.ID), Value: enc(here), Version: 2},
		{Key: allocator.HandleKey("net.bad.eth0"), Value: []byte("{not json"), Version: 3},
	})
	if m.bad[allocator.HandleKey("net.bad.eth0")] == "" || len(m.bad) != 1 {
		t.Errorf("an undecodable value read again is forgotten: %v", m.bad)
	}
	m.replace(6, []kv.KeyValue{{Key: allocator.PoolKey("b-tiny"), Value: enc(poolTiny), Version: 1}})
	if len(m.blocks) != 0 || len(m.handles) != 0 || len(m.bad) != 0 || len(m.byPool) != 0 || len(m.podCount) != 0 {
		t.Errorf("after everything but the pool went: blocks %d, handles %d, bad %v, byPool %v, pods %v",
			len(m.blocks), len(m.handles), m.bad, m.byPool, m.podCount)
	}
	// Replayed watch events older than the mirror change nothing.
	m.apply(7, []change{{key: allocator.PoolKey("b-tiny"), value: []byte("{not json"), version: 1}})
	if m.pools["b-tiny"] == nil || len(m.bad) != 0 {
		t.Errorf("a replayed event overwrote a newer pool: %v %v", m.pools, m.bad)
	}
	if m.rev != 7 {
		t.Errorf("revision %d after an event at 7", m.rev)
	}
}
