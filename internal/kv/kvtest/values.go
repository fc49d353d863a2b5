package kvtest

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/kv"
)

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
