package local_test

import (
	"context"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store/local"
)

// TestRevisionFollowsWrites: a new store is at revision 0; every writing
// Txn moves it to the version its keys got; a Txn that only checks
// conditions, or fails them, leaves it; it survives reopening.
func TestRevisionFollowsWrites(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := local.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	rev := func() int64 {
		t.Helper()
		r, err := s.Revision(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := rev(); r != 0 {
		t.Fatalf("new store at revision %d, want 0", r)
	}
	w1, err := s.TxnRevision(ctx, nil, []kv.Op{{Key: "a", Value: []byte("1")}})
	if err != nil {
		t.Fatal(err)
	}
	if r := rev(); r != w1 || r == 0 {
		t.Fatalf("after a write: revision %d, the write's %d", r, w1)
	}
	if err := s.Txn(ctx, []kv.Cond{{Key: "a", Version: w1}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Txn(ctx, []kv.Cond{{Key: "a", Version: 0}}, []kv.Op{{Key: "b", Value: []byte("x")}}); err == nil {
		t.Fatal("a failed condition wrote")
	}
	if r := rev(); r != w1 {
		t.Fatalf("check-only and failed Txns moved the revision from %d to %d", w1, r)
	}
	if err := s.Txn(ctx, nil, []kv.Op{{Key: "a", Delete: true}}); err != nil {
		t.Fatal(err)
	}
	w2 := rev()
	if w2 <= w1 {
		t.Fatalf("a delete left the revision at %d (was %d)", w2, w1)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = local.Open(ctx, dir); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if r := rev(); r != w2 {
		t.Fatalf("after reopening: revision %d, want %d", r, w2)
	}
}
