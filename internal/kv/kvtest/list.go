package kvtest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/kv"
)

func listKeys(kvs []kv.KeyValue) []string {
	keys := make([]string, len(kvs))
	for i, e := range kvs {
		keys[i] = e.Key
	}
	return keys
}

// list runs List and checks what every List result must satisfy: sorted,
// unique, every key under prefix, positive versions that match Get.
func list(t *testing.T, s kv.Store, prefix string) []kv.KeyValue {
	t.Helper()
	kvs, err := s.List(t.Context(), prefix)
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	for i, e := range kvs {
		if len(e.Key) < len(prefix) || e.Key[:len(prefix)] != prefix {
			t.Fatalf("List(%q) returned %q outside the prefix", prefix, e.Key)
		}
		if e.Version <= 0 {
			t.Fatalf("List(%q): %q has version %d", prefix, e.Key, e.Version)
		}
		if i > 0 && kvs[i-1].Key >= e.Key {
			t.Fatalf("List(%q) not sorted/unique at %d: %q then %q", prefix, i, kvs[i-1].Key, e.Key)
		}
	}
	return kvs
}

func putAll(t *testing.T, s kv.Store, keys []string) {
	t.Helper()
	ops := make([]kv.Op, len(keys))
	for i, k := range keys {
		ops[i] = kv.Op{Key: k, Value: []byte("v:" + k)}
	}
	txn(t, s, nil, ops)
}

func testListPrefix(t *testing.T, s kv.Store) {
	putAll(t, s, []string{
		"pools/b", "pools/a", "pools/ab", "poolsx", "pool", "blocks/p/1", "handles/n.c.eth0",
	})
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"pools/", []string{"pools/a", "pools/ab", "pools/b"}},
		{"pools/a", []string{"pools/a", "pools/ab"}},
		{"pool", []string{"pool", "pools/a", "pools/ab", "pools/b", "poolsx"}},
		{"blocks/", []string{"blocks/p/1"}},
		{"handles/n.c.eth0", []string{"handles/n.c.eth0"}},
		{"nothing/", nil},
		{"pools/c", nil},
		{"", []string{"blocks/p/1", "handles/n.c.eth0", "pool", "pools/a", "pools/ab", "pools/b", "poolsx"}},
	} {
		got := list(t, s, tc.prefix)
		if !slices.Equal(listKeys(got), tc.want) {
			t.Errorf("List(%q) = %v, want %v", tc.prefix, listKeys(got), tc.want)
		}
		for _, e := range got {
			g := get(t, s, e.Key)
			if string(e.Value) != "v:"+e.Key || e.Version != g.Version {
				t.Errorf("List(%q): %q=%q@%d, Get says %q@%d", tc.prefix, e.Key, e.Value, e.Version, g.Value, g.Version)
			}
		}
	}
}

// A prefix that is itself a strict prefix of other keys (and maybe a key)
// returns exactly the keys starting with it: block keys share text.
func testListStrictPrefix(t *testing.T, s kv.Store) {
	putAll(t, s, []string{
		"blocks/p/1",
		"blocks/p/10.0.0.0-26",
		"blocks/p/10.0.0.64-26",
		"blocks/p/100.64.0.0-26",
		"blocks/p/fd00::-122",
		"blocks/p2/10.0.0.0-26",
		"blocks/q",
	})
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"blocks/p/10.", []string{"blocks/p/10.0.0.0-26", "blocks/p/10.0.0.64-26"}},
		{"blocks/p/10", []string{"blocks/p/10.0.0.0-26", "blocks/p/10.0.0.64-26", "blocks/p/100.64.0.0-26"}},
		{"blocks/p/1", []string{"blocks/p/1", "blocks/p/10.0.0.0-26", "blocks/p/10.0.0.64-26", "blocks/p/100.64.0.0-26"}},
		{"blocks/p/", []string{"blocks/p/1", "blocks/p/10.0.0.0-26", "blocks/p/10.0.0.64-26", "blocks/p/100.64.0.0-26", "blocks/p/fd00::-122"}},
		{"blocks/p", []string{"blocks/p/1", "blocks/p/10.0.0.0-26", "blocks/p/10.0.0.64-26", "blocks/p/100.64.0.0-26", "blocks/p/fd00::-122", "blocks/p2/10.0.0.0-26"}},
		{"blocks/p/fd00::", []string{"blocks/p/fd00::-122"}},
		{"blocks/p/10.0.0.0-26/", nil},
	} {
		if got := listKeys(list(t, s, tc.prefix)); !slices.Equal(got, tc.want) {
			t.Errorf("List(%q) = %v, want %v", tc.prefix, got, tc.want)
		}
	}
}

// Order is bytewise (Go string order), not locale or numeric order.
func testListSorted(t *testing.T, s kv.Store) {
	keys := []string{
		"s/b", "s/a0", "s/a/", "s/a", "s/B", "s/a-1", "s/a.1", "s/a~", "s/é", "s/z", "s/10", "s/9", "s/ 1", "s/\x7f",
	}
	putAll(t, s, keys)
	want := slices.Clone(keys)
	slices.Sort(want)
	if got := listKeys(list(t, s, "s/")); !slices.Equal(got, want) {
		t.Fatalf("List order = %q, want %q", got, want)
	}
}

func testListManyKeys(t *testing.T, s kv.Store) {
	const n = 2000
	want := make([]string, 0, n)
	var ops []kv.Op
	for i := range n {
		// Written in a shuffled order: 7 is coprime with n.
		k := fmt.Sprintf("ips/pool/10.%d.%d", (i*7%n)/256, (i*7%n)%256)
		want = append(want, k)
		ops = append(ops, kv.Op{Key: k, Value: []byte(k)})
		if len(ops) == 100 {
			txn(t, s, nil, ops)
			ops = nil
		}
	}
	putAll(t, s, []string{"ips/poo", "ips/pool0/x", "ipt/pool/x"})
	slices.Sort(want)
	got := list(t, s, "ips/pool/")
	if len(got) != n {
		t.Fatalf("List returned %d entries, want %d", len(got), n)
	}
	for i, e := range got {
		if e.Key != want[i] || string(e.Value) != want[i] {
			t.Fatalf("entry %d: %q=%q, want %q", i, e.Key, e.Value, want[i])
		}
	}
}

func testTxnManyOps(t *testing.T, s kv.Store) {
	const n = 100
	conds := make([]kv.Cond, n)
	ops := make([]kv.Op, n)
	for i := range n {
		k := fmt.Sprintf("big/%03d", i)
		conds[i] = kv.Cond{Key: k, Version: 0}
		ops[i] = kv.Op{Key: k, Value: []byte(k)}
	}
	txn(t, s, conds, ops)
	got := list(t, s, "big/")
	if len(got) != n {
		t.Fatalf("after %d-op txn List has %d entries", n, len(got))
	}
	// Second round: CAS on all of them, with the last cond stale.
	for i, e := range got {
		conds[i].Version = e.Version
		ops[i] = kv.Op{Key: e.Key, Value: []byte("v2")}
	}
	conds[n-1].Version = 0
	wantConflict(t, s.Txn(t.Context(), conds, ops), "100-op txn with the last cond stale")
	for _, e := range list(t, s, "big/") {
		if string(e.Value) == "v2" {
			t.Fatalf("%q was written by a failed txn", e.Key)
		}
	}
	conds[n-1].Version = got[n-1].Version
	txn(t, s, conds, ops)
	for _, e := range list(t, s, "big/") {
		if string(e.Value) != "v2" {
			t.Fatalf("%q = %q after a successful 100-op txn", e.Key, e.Value)
		}
	}
	// And delete them all in one txn.
	for i := range ops {
		ops[i] = kv.Op{Key: ops[i].Key, Delete: true}
	}
	txn(t, s, nil, ops)
	if got := list(t, s, "big/"); len(got) != 0 {
		t.Fatalf("after deleting all: %d left", len(got))
	}
}
