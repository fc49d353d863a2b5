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
		{"TxnManyOps", testTxnManyOps},
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

// wantConflict fails unless err wraps kv.ErrConflict.
func wantConflict(t *testing.T, err error, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: Txn succeeded, want kv.ErrConflict", what)
	}
	if !errors.Is(err, kv.ErrConflict) {
		t.Fatalf("%s: Txn error %v does not wrap kv.ErrConflict", what, err)
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

func testEmptyValue(t *testing.T, s kv.Store) {
	txn(t, s, []kv.Cond{{Key: "empty", Version: 0}}, []kv.Op{{Key: "empty", Value: []byte{}}})
	e := get(t, s, "empty")
	if e.Version <= 0 || len(e.Value) != 0 {
		t.Fatalf("empty value: %q@%d, want empty value at a positive version", e.Value, e.Version)
	}
	txn(t, s, nil, []kv.Op{{Key: "nilval", Value: nil}})
	if e := get(t, s, "nilval"); e.Version <= 0 || len(e.Value) != 0 {
		t.Fatalf("nil value put: %q@%d, want an existing key with an empty value", e.Value, e.Version)
	}
	list, err := s.List(t.Context(), "")
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(list) != 2 || list[0].Key != "empty" || list[1].Key != "nilval" {
		t.Fatalf("List: %v, want [empty nilval]", listKeys(list))
	}
	// Overwriting an empty value with a CAS works like any other.
	txn(t, s, []kv.Cond{{Key: "empty", Version: e.Version}}, []kv.Op{{Key: "empty", Value: []byte("now")}})
}

func testBinaryValue(t *testing.T, s kv.Store) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	big := bytes.Repeat([]byte{0x00, 0xff, 0xc3, 0x28, '\n', 0x80}, 64<<10/6)
	for _, tc := range []struct {
		key string
		val []byte
	}{
		{"bin/all-bytes", all},
		{"bin/nul", []byte{0}},
		{"bin/invalid-utf8", []byte{0xc3, 0x28, 0xa0, 0xa1}},
		{"bin/64KiB", big},
	} {
		put(t, s, tc.key, tc.val)
	}
	list, err := s.List(t.Context(), "bin/")
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(list) != 4 {
		t.Fatalf("List(bin/): %d entries, want 4", len(list))
	}
	for _, e := range list {
		if e.Key == "bin/64KiB" && !bytes.Equal(e.Value, big) {
			t.Fatalf("List returned a different 64 KiB value (len %d)", len(e.Value))
		}
	}
}

// Stores must copy values in and out: callers reuse their buffers.
func testValuesAreCopied(t *testing.T, s kv.Store) {
	buf := []byte("original")
	txn(t, s, nil, []kv.Op{{Key: "k", Value: buf}})
	copy(buf, "XXXXXXXX")
	e := get(t, s, "k")
	if string(e.Value) != "original" {
		t.Fatalf("value changed with the caller's buffer after Txn: %q", e.Value)
	}
	copy(e.Value, "YYYYYYYY")
	if e2 := get(t, s, "k"); string(e2.Value) != "original" {
		t.Fatalf("value changed with a slice returned by Get: %q", e2.Value)
	}
	list, err := s.List(t.Context(), "k")
	if err != nil || len(list) != 1 {
		t.Fatalf("List: %v, %v", list, err)
	}
	copy(list[0].Value, "ZZZZZZZZ")
	// Reading after more writes must not see stale or reused memory.
	for i := range 20 {
		put(t, s, fmt.Sprintf("filler/%d", i), bytes.Repeat([]byte{byte(i)}, 1024))
	}
	if e3 := get(t, s, "k"); string(e3.Value) != "original" {
		t.Fatalf("value changed with a slice returned by List: %q", e3.Value)
	}
	if string(list[0].Value) != "ZZZZZZZZ" || string(e.Value) != "YYYYYYYY" {
		t.Fatalf("returned slices changed under the caller: %q %q", list[0].Value, e.Value)
	}
}
