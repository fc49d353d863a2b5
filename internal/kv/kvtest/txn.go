package kvtest

import (
	"bytes"
	"errors"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

func testCreateIfAbsent(t *testing.T, s kv.Store) {
	txn(t, s, []kv.Cond{{Key: "pools/x", Version: 0}}, []kv.Op{{Key: "pools/x", Value: []byte("v1")}})
	e := get(t, s, "pools/x")
	if string(e.Value) != "v1" || e.Version <= 0 {
		t.Fatalf("after create: %q@%d, want \"v1\"@>0", e.Value, e.Version)
	}
}

func testCreateIfAbsentFailsWhenPresent(t *testing.T, s kv.Store) {
	v := put(t, s, "k", []byte("first"))
	err := s.Txn(t.Context(), []kv.Cond{{Key: "k", Version: 0}}, []kv.Op{{Key: "k", Value: []byte("second")}})
	wantConflict(t, err, "create of existing key")
	e := get(t, s, "k")
	if string(e.Value) != "first" || e.Version != v {
		t.Fatalf("after failed create: %q@%d, want \"first\"@%d", e.Value, e.Version, v)
	}
}

func testVersionsChange(t *testing.T, s kv.Store) {
	seen := map[int64]bool{}
	var last int64
	for i := range 5 {
		v := put(t, s, "k", []byte{byte(i)})
		if seen[v] {
			t.Fatalf("write %d: version %d was already used by an earlier write of the key", i, v)
		}
		seen[v] = true
		last = v
	}
	// Writing another key leaves k's version alone.
	put(t, s, "other", []byte("x"))
	if e := get(t, s, "k"); e.Version != last {
		t.Fatalf("version of k changed from %d to %d by a write of another key", last, e.Version)
	}
	// Rewriting the same value is still a write.
	v := put(t, s, "k", []byte{4})
	if seen[v] {
		t.Fatalf("rewrite of the same value kept version %d", v)
	}
}

// A reader that saw version v before a delete and re-create must not be
// able to CAS against the re-created key (no ABA).
func testVersionNotReusedAfterDelete(t *testing.T, s kv.Store) {
	v1 := put(t, s, "k", []byte("a"))
	txn(t, s, []kv.Cond{{Key: "k", Version: v1}}, []kv.Op{{Key: "k", Delete: true}})
	txn(t, s, []kv.Cond{{Key: "k", Version: 0}}, []kv.Op{{Key: "k", Value: []byte("a")}})
	v2 := get(t, s, "k").Version
	if v2 == v1 {
		t.Fatalf("re-created key got the version %d it had before the delete", v1)
	}
	err := s.Txn(t.Context(), []kv.Cond{{Key: "k", Version: v1}}, []kv.Op{{Key: "k", Value: []byte("b")}})
	wantConflict(t, err, "CAS with the version from before a delete")
}

func testCASCurrent(t *testing.T, s kv.Store) {
	v1 := put(t, s, "k", []byte("one"))
	txn(t, s, []kv.Cond{{Key: "k", Version: v1}}, []kv.Op{{Key: "k", Value: []byte("two")}})
	e := get(t, s, "k")
	if string(e.Value) != "two" || e.Version == v1 || e.Version <= 0 {
		t.Fatalf("after CAS: %q@%d, want \"two\" at a new positive version (old %d)", e.Value, e.Version, v1)
	}
}

func testCASStale(t *testing.T, s kv.Store) {
	v1 := put(t, s, "k", []byte("one"))
	v2 := put(t, s, "k", []byte("two"))
	err := s.Txn(t.Context(), []kv.Cond{{Key: "k", Version: v1}}, []kv.Op{{Key: "k", Value: []byte("three")}})
	wantConflict(t, err, "CAS with stale version")
	if e := get(t, s, "k"); string(e.Value) != "two" || e.Version != v2 {
		t.Fatalf("after failed CAS: %q@%d, want \"two\"@%d", e.Value, e.Version, v2)
	}
	// A made-up version that was never current fails too.
	err = s.Txn(t.Context(), []kv.Cond{{Key: "k", Version: v2 + 1000}}, []kv.Op{{Key: "k", Value: []byte("x")}})
	wantConflict(t, err, "CAS with a future version")
}

func testCondOnMissingWithVersion(t *testing.T, s kv.Store) {
	err := s.Txn(t.Context(), []kv.Cond{{Key: "absent", Version: 1}}, []kv.Op{{Key: "absent", Value: []byte("x")}})
	wantConflict(t, err, "cond version 1 on a missing key")
	wantMissing(t, get(t, s, "absent"), "absent")
}

// One bad cond among several fails the whole transaction: no op of it is
// applied, no version moves.
func testFailedTxnAppliesNothing(t *testing.T, s kv.Store) {
	va := put(t, s, "a", []byte("a0"))
	vb := put(t, s, "b", []byte("b0"))
	vc := put(t, s, "c", []byte("c0"))
	put(t, s, "b", []byte("b1"))
	vb1 := get(t, s, "b").Version

	conds := []kv.Cond{{Key: "a", Version: va}, {Key: "b", Version: vb}, {Key: "d", Version: 0}}
	ops := []kv.Op{
		{Key: "a", Value: []byte("a1")},
		{Key: "b", Value: []byte("b2")},
		{Key: "c", Delete: true},
		{Key: "d", Value: []byte("d0")},
	}
	wantConflict(t, s.Txn(t.Context(), conds, ops), "multi-key txn with one stale cond")

	want := map[string]kv.KeyValue{
		"a": {Key: "a", Value: []byte("a0"), Version: va},
		"b": {Key: "b", Value: []byte("b1"), Version: vb1},
		"c": {Key: "c", Value: []byte("c0"), Version: vc},
	}
	for _, k := range []string{"a", "b", "c"} {
		e := get(t, s, k)
		if !bytes.Equal(e.Value, want[k].Value) || e.Version != want[k].Version {
			t.Fatalf("%s after failed txn: %q@%d, want %q@%d", k, e.Value, e.Version, want[k].Value, want[k].Version)
		}
	}
	wantMissing(t, get(t, s, "d"), "d")
	list, err := s.List(t.Context(), "")
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(list) != 3 {
		t.Fatalf("List after failed txn: %d entries, want 3", len(list))
	}

	// The same txn with the current version of b applies everything.
	conds[1].Version = vb1
	txn(t, s, conds, ops)
	for k, v := range map[string]string{"a": "a1", "b": "b2", "d": "d0"} {
		if e := get(t, s, k); string(e.Value) != v {
			t.Fatalf("%s after successful txn: %q, want %q", k, e.Value, v)
		}
	}
	wantMissing(t, get(t, s, "c"), "c")
}

// A transaction with conditions but no ops checks without writing.
func testCondOnlyTxn(t *testing.T, s kv.Store) {
	v := put(t, s, "k", []byte("x"))
	txn(t, s, []kv.Cond{{Key: "k", Version: v}, {Key: "absent", Version: 0}}, nil)
	wantConflict(t, s.Txn(t.Context(), []kv.Cond{{Key: "k", Version: 0}}, nil), "cond-only txn that fails")
	if e := get(t, s, "k"); e.Version != v {
		t.Fatalf("cond-only txn changed the version from %d to %d", v, e.Version)
	}
	txn(t, s, nil, nil)
}

func testDelete(t *testing.T, s kv.Store) {
	v := put(t, s, "blocks/p/10.0.0.0-26", []byte("blk"))
	put(t, s, "blocks/p/10.0.0.64-26", []byte("blk2"))
	txn(t, s, []kv.Cond{{Key: "blocks/p/10.0.0.0-26", Version: v}}, []kv.Op{{Key: "blocks/p/10.0.0.0-26", Delete: true}})
	wantMissing(t, get(t, s, "blocks/p/10.0.0.0-26"), "blocks/p/10.0.0.0-26")
	list, err := s.List(t.Context(), "blocks/")
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(list) != 1 || list[0].Key != "blocks/p/10.0.0.64-26" {
		t.Fatalf("List after delete: %v, want only blocks/p/10.0.0.64-26", listKeys(list))
	}
	// A deleted key can be created again with Version 0.
	txn(t, s, []kv.Cond{{Key: "blocks/p/10.0.0.0-26", Version: 0}}, []kv.Op{{Key: "blocks/p/10.0.0.0-26", Value: []byte("again")}})
	if e := get(t, s, "blocks/p/10.0.0.0-26"); string(e.Value) != "again" || e.Version <= 0 {
		t.Fatalf("re-created key: %q@%d", e.Value, e.Version)
	}
}

func testDeleteMissing(t *testing.T, s kv.Store) {
	txn(t, s, nil, []kv.Op{{Key: "never-written", Delete: true}})
	wantMissing(t, get(t, s, "never-written"), "never-written")
	// A delete guarded by "must not exist" is fine too.
	txn(t, s, []kv.Cond{{Key: "never-written", Version: 0}}, []kv.Op{{Key: "never-written", Delete: true}})
}

// A store that reports transaction revisions must report the version the
// written keys really got, so callers can CAS against it without reading.
func testTxnRevision(t *testing.T, s kv.Store) {
	r, ok := s.(kv.RevisionTxner)
	if !ok {
		t.Skip("store does not implement kv.RevisionTxner")
	}
	for i := range 3 {
		rev, err := r.TxnRevision(t.Context(), nil, []kv.Op{{Key: "a", Value: []byte{byte(i)}}, {Key: "b", Value: []byte("x")}})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range []kv.KeyValue{get(t, s, "a"), get(t, s, "b")} {
			if rev == 0 || e.Version != rev {
				t.Fatalf("TxnRevision returned %d, %s has version %d", rev, e.Key, e.Version)
			}
		}
		if _, err := r.TxnRevision(t.Context(), []kv.Cond{{Key: "a", Version: rev - 1}}, []kv.Op{{Key: "a"}}); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("TxnRevision with a stale cond: %v, want ErrConflict", err)
		}
	}
}
