package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
)

// TestWatchReportsPutsAndDeletesAfterRevision: Revision moves with every
// write, and Watch from a revision replays exactly the later changes under
// its prefix — puts with their versions, deletes with the deletion's
// revision — and none under other prefixes or of other stores.
func TestWatchReportsPutsAndDeletesAfterRevision(t *testing.T) {
	srv := etcdtest.ForTest(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := func(prefix string) *etcd.Store {
		s, err := etcd.Open(ctx, etcd.Config{Endpoints: []string{srv.Endpoint}, Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	s, other := open("/w"), open("/w-other")
	put := func(st *etcd.Store, k, v string) int64 {
		rev, err := kv.TxnRevision(ctx, st, nil, []kv.Op{{Key: k, Value: []byte(v)}})
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	put(s, "blocks/a", "before")
	start, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r1 := put(s, "blocks/a", "one")
	put(other, "blocks/a", "elsewhere")
	put(s, "pools/p", "not watched")
	r2 := put(s, "blocks/b", "two")
	if err := s.Txn(ctx, nil, []kv.Op{{Key: "blocks/a", Delete: true}}); err != nil {
		t.Fatal(err)
	}
	end, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !(start < r1 && r1 < r2 && r2 < end) {
		t.Fatalf("revisions do not grow: start %d, puts %d %d, after delete %d", start, r1, r2, end)
	}
	want := []etcd.Event{
		{Key: "blocks/a", Value: []byte("one"), Version: r1},
		{Key: "blocks/b", Value: []byte("two"), Version: r2},
		{Key: "blocks/a", Version: end, Delete: true},
	}
	var got []etcd.Event
	wctx, wcancel := context.WithCancel(ctx)
	err = s.Watch(wctx, "blocks/", start, func(rev int64, evs []etcd.Event) {
		for _, e := range evs {
			if e.Version > rev {
				t.Errorf("change of %s at %d reported in a response of revision %d", e.Key, e.Version, rev)
			}
		}
		got = append(got, evs...)
		if len(got) >= len(want) {
			wcancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch returned %v, want context.Canceled after the last event", err)
	}
	if len(got) != len(want) {
		t.Fatalf("got %d events %+v, want %+v", len(got), got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Key != w.Key || string(g.Value) != string(w.Value) || g.Version != w.Version || g.Delete != w.Delete {
			t.Errorf("event %d = %+v, want %+v", i, g, w)
		}
	}
}

// TestWatchUnreachable: a stream that cannot be opened wraps
// store.ErrUnavailable.
func TestWatchUnreachable(t *testing.T) {
	port, err := etcdtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := etcd.Open(ctx, etcd.Config{Endpoints: []string{fmt.Sprintf("127.0.0.1:%d", port)}, RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Watch(ctx, "", 0, func(int64, []etcd.Event) {})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Watch on a closed port: %v, want store.ErrUnavailable", err)
	}
	if _, err := s.Revision(ctx); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Revision on a closed port: %v, want store.ErrUnavailable", err)
	}
}
