package kvtest

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/kv"
)

// prefixGetter returns s as a kv.PrefixGetter, or skips the test for a
// store that does not offer it (the interface is optional).
func prefixGetter(t *testing.T, s kv.Store) kv.PrefixGetter {
	t.Helper()
	pg, ok := s.(kv.PrefixGetter)
	if !ok {
		t.Skipf("%T does not implement kv.PrefixGetter", s)
	}
	return pg
}

// sameEntries fails unless got and want hold the same keys, values and
// versions in the same order.
func sameEntries(t *testing.T, what string, got, want []kv.KeyValue) {
	t.Helper()
	eq := slices.EqualFunc(got, want, func(a, b kv.KeyValue) bool {
		return a.Key == b.Key && bytes.Equal(a.Value, b.Value) && (a.Value == nil) == (b.Value == nil) && a.Version == b.Version
	})
	if !eq {
		t.Fatalf("%s: got %d entries %v, want %d %v", what, len(got), listKeys(got), len(want), listKeys(want))
	}
}

// GetWithPrefix returns what Get and List return: the keys in the order
// asked (missing ones too), and exactly the keys under the prefix, sorted;
// many keys (more than one etcd transaction) and many under the prefix
// (more than one page) as well.
func testGetWithPrefix(t *testing.T, s kv.Store) {
	pg := prefixGetter(t, s)
	putAll(t, s, []string{"m/a", "m/b", "p/x", "p/y", "p/x/deep", "px", "p", "q"})
	check := func(keys []string, prefix string) {
		t.Helper()
		es, under, err := pg.GetWithPrefix(t.Context(), keys, prefix)
		if err != nil {
			t.Fatalf("GetWithPrefix(%d keys, %q): %v", len(keys), prefix, err)
		}
		want, err := s.Get(t.Context(), keys...)
		if err != nil {
			t.Fatal(err)
		}
		sameEntries(t, fmt.Sprintf("GetWithPrefix(%d keys, %q) entries", len(keys), prefix), es, want)
		sameEntries(t, fmt.Sprintf("GetWithPrefix(%d keys, %q) under", len(keys), prefix), under, list(t, s, prefix))
	}
	check([]string{"m/b", "missing", "m/a", "m/b"}, "p/")
	check(nil, "p/")
	check([]string{"q"}, "p/x")
	check([]string{"q"}, "nothing/")
	check([]string{"p/x"}, "")

	const keys, parts = 300, 1100
	var ks []string
	for i := range keys {
		ks = append(ks, fmt.Sprintf("k/%03d", keys-1-i))
	}
	var ops []kv.Op
	for i := range parts {
		ops = append(ops, kv.Op{Key: fmt.Sprintf("parts/%04d", i), Value: []byte(strconv.Itoa(i))})
		if i%2 == 0 && i < keys {
			ops = append(ops, kv.Op{Key: ks[i], Value: []byte(ks[i])})
		}
		if len(ops) >= 100 {
			txn(t, s, nil, ops)
			ops = nil
		}
	}
	txn(t, s, nil, ops)
	check(ks, "parts/")
}

// GetWithPrefix reads the keys and the prefix at one revision: a writer
// changes, in every transaction, the first and the last of many keys
// (read by different etcd transactions) and keys under the prefix, one
// of them renamed every time; every read sees them all of one write.
func testGetWithPrefixOneRevision(t *testing.T, s kv.Store) {
	pg := prefixGetter(t, s)
	const keys, writes = 200, 150
	var ks []string
	for i := range keys {
		ks = append(ks, fmt.Sprintf("w/%03d", i))
	}
	write := func(n int) []kv.Op {
		v := []byte(strconv.Itoa(n))
		ops := []kv.Op{
			{Key: ks[0], Value: v}, {Key: ks[keys-1], Value: v},
			{Key: "p/a", Value: v}, {Key: "p/z", Value: v},
			{Key: fmt.Sprintf("p/m%d", n), Value: v},
		}
		if n > 0 {
			ops = append(ops, kv.Op{Key: fmt.Sprintf("p/m%d", n-1), Delete: true})
		}
		return ops
	}
	txn(t, s, nil, write(0))
	seen := map[string]bool{}
	read := func() error {
		es, under, err := pg.GetWithPrefix(t.Context(), ks, "p/")
		if err != nil {
			return err
		}
		first := es[0]
		if len(under) != 3 {
			return fmt.Errorf("%d keys under p/ (%v), want 3: p/a, one p/m<n>, p/z", len(under), listKeys(under))
		}
		for _, e := range []kv.KeyValue{es[keys-1], under[0], under[1], under[2]} {
			if !bytes.Equal(e.Value, first.Value) || e.Version != first.Version {
				return fmt.Errorf("%s=%q@%d read with %s=%q@%d: not of one revision", e.Key, e.Value, e.Version, first.Key, first.Value, first.Version)
			}
		}
		if want := "p/m" + string(first.Value); under[1].Key != want {
			return fmt.Errorf("%s read with %s=%q: not of one revision", under[1].Key, first.Key, first.Value)
		}
		seen[string(first.Value)] = true
		return nil
	}
	if err := read(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for n := 1; n <= writes; n++ {
			if err := s.Txn(t.Context(), nil, write(n)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	reads := 0
	for running := true; running; reads++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("writer: %v", err)
			}
			running = false
		default:
		}
		if err := read(); err != nil {
			t.Fatalf("read %d: %v", reads, err)
		}
	}
	if !seen["0"] || !seen[strconv.Itoa(writes)] {
		t.Fatalf("reads saw %d of the %d writes but not the first and the last", len(seen), writes+1)
	}
	t.Logf("%d reads during %d writes saw %d of them", reads, writes, len(seen))
}
