package kvbacked_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
)

// TestWatchTypedEvents: on etcd, Watch reports pools, claims and node
// objects (IPv4 and IPv6 blocks) created, updated, deleted and written
// corrupt, in order, each with the Version its state has, and leaves the
// claims' index keys and the lends keys out; the local file cannot be
// watched (ErrNoWatch) but tells its revision.
func TestWatchTypedEvents(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	loc := kvbacked.New(openLocal(t))
	defer loc.Close()
	if loc.Watchable() || !errors.Is(loc.Watch(ctx, 0, func(int64, []kvbacked.Event) {}), kvbacked.ErrNoWatch) {
		t.Error("the local file claims to be watchable")
	}
	if _, err := loc.Revision(ctx); err != nil {
		t.Errorf("local revision: %v", err)
	}

	kvs := openEtcd(t)
	s := kvbacked.New(kvs)
	defer s.Close()
	if !s.Watchable() {
		t.Fatal("etcd is not watchable")
	}
	rev, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p4 := ipam.Pool{Name: "v4", CIDR: netip.MustParsePrefix("10.9.0.0/24"), BlockSize: 26}
	p6 := ipam.Pool{Name: "v6", CIDR: netip.MustParsePrefix("fd00:9::/64"), BlockSize: 122}
	sp, err := s.CreatePool(ctx, store.Pool{Spec: p4})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreatePool(ctx, store.Pool{Spec: p6}); err != nil {
		t.Fatal(err)
	}
	b4, _ := p4.CIDR.Addr().Prefix(26)
	b6, _ := p6.CIDR.Addr().Prefix(122)
	c6, err := s.CreateClaim(ctx, store.Claim{BlockRef: store.BlockRef{Pool: "v6", CIDR: b6}, Node: "node-b"})
	if err != nil {
		t.Fatal(err)
	}
	blk := ipam.NewBlock(p4, b4, "node-a")
	blk, addr, err := blk.Assign(p4, "net.ctr.eth0")
	if err != nil {
		t.Fatal(err)
	}
	n := store.Node{Name: "node-a", Blocks: []ipam.Block{blk}, Handles: []ipam.Handle{{ID: "net.ctr.eth0", Node: "node-b",
		IPs: []ipam.HandleIP{{Addr: addr, Pool: "v4", Block: b4}}}}}
	n, err = s.CreateNode(ctx, n) // lends to node-b: a lends key too
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteClaim(ctx, c6); err != nil {
		t.Fatal(err)
	}
	if err := kvs.Txn(ctx, nil, []kv.Op{{Key: "nodes/node-x/head", Value: []byte("{not json")}}); err != nil {
		t.Fatal(err)
	}

	want := []string{"pool v4 " + string(sp.Version), "pool v6", "claim v6/fd00:9::/122", "node node-a " + string(n.Version),
		"deleted claim v6/fd00:9::/122", "corrupt node node-x"}
	var got []string
	wctx, wcancel := context.WithCancel(ctx)
	err = s.Watch(wctx, rev, func(_ int64, evs []kvbacked.Event) {
		for _, ev := range evs {
			var d string
			switch ev.Kind {
			case kvbacked.KindPool:
				d = "pool " + ev.Pool.Spec.Name
				if ev.Pool.Spec.Name == "v4" {
					d += " " + string(ev.Pool.Version)
				}
			case kvbacked.KindClaim:
				d = "claim " + ev.Claim.BlockRef.String()
			case kvbacked.KindNode:
				d = "node " + ev.Node.Name
				if ev.Err == nil && !ev.Deleted {
					if len(ev.Node.Handles) != 1 || ev.Node.Blocks[0].Owners[1] != "net.ctr.eth0" {
						t.Errorf("node event %+v", ev.Node)
					}
					d += " " + string(ev.Node.Version)
				}
			}
			if ev.Deleted {
				d = "deleted " + d
			}
			if ev.Err != nil {
				if !errors.Is(ev.Err, store.ErrCorrupt) {
					t.Errorf("%s: error %v, want ErrCorrupt", d, ev.Err)
				}
				d = "corrupt " + d
			}
			got = append(got, d)
		}
		if len(got) >= len(want) {
			wcancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch: %v (events %q)", err, got)
	}
	if len(got) != len(want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d: %q, want %q", i, got[i], want[i])
		}
	}
}
