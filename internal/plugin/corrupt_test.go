package plugin

import (
	"context"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/consistency"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
	"github.com/ipkeeper/ipkeeper/internal/store/local"
)

// TestCorruptNodeObjectIs999: an ADD on a node whose stored object cannot
// be decoded fails with code 999 (the CNI specification's internal
// error), naming the object and 'ipkeeperctl check', and changes
// nothing; the checker reports the object as corrupt-value. README's
// error table documents the code.
func TestCorruptNodeObjectIs999(t *testing.T) {
	h := newHarness(t)
	stdin := h.conf("1.1.0", v4Ranges)
	if _, err := h.add("c1", stdin); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, err := local.Open(ctx, h.dir)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Txn(ctx, nil, []kv.Op{{Key: kvbacked.NodeHeadKey("node-a"), Value: []byte("not a node object")}})
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	before := h.dump()
	_, err = h.add("c2", stdin)
	if err == nil {
		t.Fatal("ADD on a corrupt node object succeeded")
	}
	if code := cniCode(t, err); code != 999 {
		t.Fatalf("ADD on a corrupt node object: code %d (%v), want 999", code, err)
	}
	for _, want := range []string{"corrupt", "node-a", "ipkeeperctl check"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not name %q: %v", want, err)
		}
	}
	if after := h.dump(); after != before {
		t.Fatalf("the failed ADD changed the store:\n%s\n->\n%s", before, after)
	}
	withTypedStore(t, config.Datastore{Type: config.DatastoreLocal, Path: h.dir}, func(s store.Store) {
		rep, err := consistency.CheckStore(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range rep.Problems {
			if p.Kind == consistency.KindCorrupt && strings.Contains(p.Key, "node-a") {
				return
			}
		}
		t.Fatalf("check does not report node-a's object as corrupt: %+v", rep.Problems)
	})
}
