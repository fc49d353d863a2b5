package kvbacked_test

import (
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
)

// TestReadLayoutWarmNode: on a kv.PrefixGetter the warm read returns the
// node object from its parts, read with the marker in one request, as
// GetNode reads it (and writable as read); a node without parts as
// absent; parts that do not decode as nothing read (the reads after it
// report them). A store that is not a kv.PrefixGetter leaves the node to
// the caller, and a hint of another store is not taken: the object is
// read.
func TestReadLayoutWarmNode(t *testing.T) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			kvs := b.Open(t)
			if err := kvs.Txn(ctx, nil, []kv.Op{{Key: kvbacked.MarkerKey, Value: []byte(kvbacked.MarkerValue)}}); err != nil {
				t.Fatal(err)
			}
			if _, _, err := kvbacked.EnsureStoreID(ctx, kvs); err != nil {
				t.Fatal(err)
			}
			s := kvbacked.New(kvs)
			defer s.Close()
			warm := func(st kv.Store, w kvbacked.Warm) kvbacked.Warmed {
				t.Helper()
				layout, warmed, err := kvbacked.ReadLayoutWarm(ctx, st, w)
				if err != nil || layout != kvbacked.LayoutTyped {
					t.Fatalf("ReadLayoutWarm: layout %v, err %v", layout, err)
				}
				return warmed
			}
			if w := warm(kvs, kvbacked.Warm{Node: "node-a"}); !w.OK || w.Node.Name != "node-a" || w.Node.Version != "" || w.Hint.Value != nil {
				t.Fatalf("warm read of a node without parts: %+v; want it absent", w)
			}

			n, err := s.CreateNode(ctx, store.Node{Name: "node-a"})
			if err != nil {
				t.Fatal(err)
			}
			next := cloneNode(n)
			addDualStack(t, &next, benchHandle("node-a", "c0"))
			if n, err = s.UpdateNode(ctx, next); err != nil {
				t.Fatal(err)
			}
			// counting is not a kv.PrefixGetter: one Get, no node.
			cs := &counting{Store: kvs}
			if w := warm(cs, kvbacked.Warm{Node: "node-a"}); w.Node.Name != "" {
				t.Fatalf("warm read through a store without kv.PrefixGetter: %+v; want the node left to the caller", w)
			}
			if gets, lists, txns := cs.Counts(); gets != 1 || lists != 0 || txns != 0 {
				t.Fatalf("warm read through a store without kv.PrefixGetter: %d gets, %d lists, %d transactions; want one get", gets, lists, txns)
			}
			w := warm(kvs, kvbacked.Warm{Node: "node-a"})
			if !w.OK || w.Node.Name != "node-a" || w.Node.Version != n.Version || len(w.Node.Handles) != 1 || len(w.Node.Blocks) != 2 ||
				w.Hint.Version != n.Version {
				t.Fatalf("warm read: %+v; want node-a at %s with 1 handle and 2 blocks", w, n.Version)
			}
			// The hint's encoding of the node is made when a store tracking
			// from it is asked.
			tracking := kvbacked.New(kvs)
			tracking.Track("node-a", w.Hint)
			if h, ok := tracking.Tracked(); !ok || h.Version != n.Version || len(h.Value) == 0 {
				t.Fatalf("tracked from the warm read: %+v, %v; want the node at %s", h, ok, n.Version)
			}
			if w.Hinted || w.Unread {
				t.Fatalf("warm read without a hint: hinted %v, unread %v", w.Hinted, w.Unread)
			}
			next = cloneNode(w.Node)
			addDualStack(t, &next, benchHandle("node-a", "c1"))
			if n, err = s.UpdateNode(ctx, next); err != nil {
				t.Fatalf("update of the node as the warm read returned it: %v", err)
			}
			if got, err := s.GetNode(ctx, "node-a"); err != nil || len(got.Handles) != 2 {
				t.Fatalf("after the update: %d handles, err %v; want 2", len(got.Handles), err)
			}

			// A hint of another store (same versions, another identity).
			hint := w.Hint
			hint.Store, hint.Version = "another-store", n.Version
			w = warm(kvs, kvbacked.Warm{Node: "node-a", Hint: &hint})
			if !w.OK || w.Hinted || w.Node.Version != n.Version || len(w.Node.Handles) != 2 {
				t.Fatalf("warm read with another store's hint: %+v; want node-a read from the store, 2 handles", w)
			}

			if err := kvs.Txn(ctx, nil, []kv.Op{{Key: "nodes/node-a/record/bad", Value: []byte("not a record")}}); err != nil {
				t.Fatal(err)
			}
			if w := warm(kvs, kvbacked.Warm{Node: "node-a"}); w.OK {
				t.Fatalf("warm read of a node with an undecodable part: %+v; want nothing read", w)
			}
		})
	}
}
