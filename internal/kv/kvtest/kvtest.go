// Package kvtest is the conformance suite every kv.Store backend runs from
// its own tests:
//
//	func TestConformance(t *testing.T) {
//		kvtest.Run(t, func(t *testing.T) kv.Store { return openFresh(t) })
//	}
//
// It only uses the kv.Store interface, so it holds for any backend.
package kvtest

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// Run runs the whole conformance suite as subtests of t. open must return a
// fresh, empty store each time it is called; Run closes every store it
// opens and fails the test if Close returns an error.
func Run(t *testing.T, open func(t *testing.T) kv.Store) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s kv.Store)
	}{
		{"GetMissing", testGetMissing},
		{"GetManyKeys", testGetManyKeys},
		{"CreateIfAbsent", testCreateIfAbsent},
		{"CreateIfAbsentFailsWhenPresent", testCreateIfAbsentFailsWhenPresent},
		{"VersionsChangeOnEveryWrite", testVersionsChange},
		{"VersionNotReusedAfterDelete", testVersionNotReusedAfterDelete},
		{"CASCurrentVersion", testCASCurrent},
		{"CASStaleVersion", testCASStale},
		{"CondOnMissingKeyWithVersion", testCondOnMissingWithVersion},
		{"ValueCond", testValueCond},
		{"FailedTxnAppliesNothing", testFailedTxnAppliesNothing},
		{"CondOnlyTxn", testCondOnlyTxn},
		{"Delete", testDelete},
		{"DeleteMissingKey", testDeleteMissing},
		{"EmptyValue", testEmptyValue},
		{"BinaryValue", testBinaryValue},
		{"ValuesAreCopied", testValuesAreCopied},
		{"ListPrefix", testListPrefix},
		{"ListStrictPrefix", testListStrictPrefix},
		{"ListSortedBytewise", testListSorted},
		{"ListManyKeys", testListManyKeys},
		{"GetWithPrefix", testGetWithPrefix},
		{"GetWithPrefixOneRevision", testGetWithPrefixOneRevision},
		{"TxnManyOps", testTxnManyOps},
		{"TxnRevision", testTxnRevision},
		{"ConcurrentIncrements", testConcurrentIncrements},
		{"ConcurrentCreateOneWinner", testConcurrentCreate},
		{"CancelledContext", testCancelledContext},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			tc.fn(t, s)
		})
	}
}

// get returns the single entry for key.
func get(t *testing.T, s kv.Store, key string) kv.KeyValue {
	t.Helper()
	kvs, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	if len(kvs) != 1 {
		t.Fatalf("Get(%q) returned %d entries, want 1", key, len(kvs))
	}
	if kvs[0].Key != key {
		t.Fatalf("Get(%q) returned key %q", key, kvs[0].Key)
	}
	return kvs[0]
}

// txn runs a transaction that must succeed.
func txn(t *testing.T, s kv.Store, conds []kv.Cond, ops []kv.Op) {
	t.Helper()
	if err := s.Txn(t.Context(), conds, ops); err != nil {
		t.Fatalf("Txn(%v, %v): %v", conds, opKeys(ops), err)
	}
}

// put writes key=val unconditionally and returns the new version.
func put(t *testing.T, s kv.Store, key string, val []byte) int64 {
	t.Helper()
	txn(t, s, nil, []kv.Op{{Key: key, Value: val}})
	e := get(t, s, key)
	if e.Version <= 0 {
		t.Fatalf("after put %q: version %d, want > 0", key, e.Version)
	}
	if !bytes.Equal(e.Value, val) {
		t.Fatalf("after put %q: value %q, want %q", key, e.Value, val)
	}
	return e.Version
}

// wantConflict fails unless err wraps store.ErrConflict.
func wantConflict(t *testing.T, err error, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: Txn succeeded, want store.ErrConflict", what)
	}
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("%s: Txn error %v does not wrap store.ErrConflict", what, err)
	}
}

// wantMissing fails unless e is the entry of a missing key.
func wantMissing(t *testing.T, e kv.KeyValue, key string) {
	t.Helper()
	if e.Key != key || e.Version != 0 || e.Value != nil {
		t.Fatalf("missing key %q: got {Key:%q Value:%q Version:%d}, want {Key:%q Value:nil Version:0}",
			key, e.Key, e.Value, e.Version, key)
	}
}

func opKeys(ops []kv.Op) []string {
	keys := make([]string, len(ops))
	for i, op := range ops {
		keys[i] = op.Key
		if op.Delete {
			keys[i] = "-" + op.Key
		}
	}
	return keys
}

func testGetMissing(t *testing.T, s kv.Store) {
	wantMissing(t, get(t, s, "nope"), "nope")

	put(t, s, "b", []byte("B"))
	keys := []string{"z", "b", "a", "b"}
	kvs, err := s.Get(t.Context(), keys...)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if len(kvs) != len(keys) {
		t.Fatalf("Get(%v) returned %d entries, want %d", keys, len(kvs), len(keys))
	}
	for i, k := range keys {
		if kvs[i].Key != k {
			t.Fatalf("entry %d: key %q, want %q (order must follow the request)", i, kvs[i].Key, k)
		}
		if k == "b" {
			if string(kvs[i].Value) != "B" || kvs[i].Version <= 0 {
				t.Fatalf("entry %d: got %q@%d, want \"B\"@>0", i, kvs[i].Value, kvs[i].Version)
			}
			continue
		}
		wantMissing(t, kvs[i], k)
	}

	kvs, err = s.Get(t.Context())
	if err != nil {
		t.Fatalf("Get(): %v", err)
	}
	if len(kvs) != 0 {
		t.Fatalf("Get() returned %d entries, want 0", len(kvs))
	}
}

func testGetManyKeys(t *testing.T, s kv.Store) {
	const n = 500
	var ops []kv.Op
	keys := make([]string, 0, n)
	for i := range n {
		k := fmt.Sprintf("many/%04d", n-1-i) // descending: order must follow the request
		keys = append(keys, k)
		if i%3 == 0 {
			ops = append(ops, kv.Op{Key: k, Value: []byte(k)})
		}
		if len(ops) == 50 {
			txn(t, s, nil, ops)
			ops = nil
		}
	}
	if len(ops) > 0 {
		txn(t, s, nil, ops)
	}
	kvs, err := s.Get(t.Context(), keys...)
	if err != nil {
		t.Fatalf("Get(%d keys): %v", n, err)
	}
	if len(kvs) != n {
		t.Fatalf("Get(%d keys) returned %d entries", n, len(kvs))
	}
	for i, k := range keys {
		e := kvs[i]
		if i%3 != 0 {
			wantMissing(t, e, k)
			continue
		}
		if e.Key != k || string(e.Value) != k || e.Version <= 0 {
			t.Fatalf("entry %d: got %q=%q@%d, want %q=%q@>0", i, e.Key, e.Value, e.Version, k, k)
		}
	}
}
