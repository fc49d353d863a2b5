package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/kv/kvtest"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

func TestConformance(t *testing.T) {
	kvtest.Run(t, func(t *testing.T) kv.Store {
		s, err := Open(t.Context(), t.TempDir())
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return s
	})
}

func openT(t *testing.T, dir string, opts ...Option) *Store {
	t.Helper()
	s, err := Open(t.Context(), dir, opts...)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestOpenDirCannotBeCreated(t *testing.T) {
	file := filepath.Join(t.TempDir(), "plain-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(file, "sub")
	_, err := Open(t.Context(), dir)
	if err == nil {
		t.Fatal("Open under a regular file succeeded")
	}
	if !errors.Is(err, ErrBadPath) || !strings.Contains(err.Error(), file+" is not a directory") {
		t.Fatalf("error %q does not say which path is not a directory", err)
	}
	if _, err := Open(t.Context(), ""); !errors.Is(err, ErrBadPath) {
		t.Fatalf("Open(\"\") = %v, want ErrBadPath", err)
	}
}

func TestPersistsAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Txn(t.Context(), nil, []kv.Op{{Key: "pools/a", Value: []byte("A")}, {Key: "pools/b", Value: []byte("B")}}); err != nil {
		t.Fatal(err)
	}
	before, _ := s.Get(t.Context(), "pools/a")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	s = openT(t, dir)
	after, err := s.Get(t.Context(), "pools/a")
	if err != nil {
		t.Fatal(err)
	}
	if string(after[0].Value) != "A" || after[0].Version != before[0].Version {
		t.Fatalf("after reopen: %q@%d, want \"A\"@%d", after[0].Value, after[0].Version, before[0].Version)
	}
	// The revision counter continues, it does not restart.
	if err := s.Txn(t.Context(), nil, []kv.Op{{Key: "x", Value: nil}}); err != nil {
		t.Fatal(err)
	}
	x, _ := s.Get(t.Context(), "x")
	if x[0].Version != before[0].Version+1 {
		t.Fatalf("first write after reopen got version %d, want %d", x[0].Version, before[0].Version+1)
	}
	if err := s.Check(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// The version is a store-wide revision: +1 per committed writing txn, the
// same for every key of one txn, untouched by failed or read-only txns.
func TestRevision(t *testing.T) {
	s := openT(t, t.TempDir())
	ctx := t.Context()
	version := func(k string) int64 {
		kvs, err := s.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		return kvs[0].Version
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Txn(ctx, nil, []kv.Op{{Key: "a", Value: []byte("1")}}))
	if v := version("a"); v != 1 {
		t.Fatalf("first write: version %d, want 1", v)
	}
	must(s.Txn(ctx, nil, []kv.Op{{Key: "b", Value: []byte("1")}, {Key: "c", Value: []byte("1")}}))
	if vb, vc := version("b"), version("c"); vb != 2 || vc != 2 {
		t.Fatalf("one txn, two keys: versions %d, %d, want 2, 2", vb, vc)
	}
	if err := s.Txn(ctx, []kv.Cond{{Key: "a", Version: 99}}, []kv.Op{{Key: "d", Value: nil}}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale cond: %v", err)
	}
	must(s.Txn(ctx, []kv.Cond{{Key: "a", Version: 1}}, nil))
	must(s.Txn(ctx, nil, []kv.Op{{Key: "b", Delete: true}}))
	must(s.Txn(ctx, nil, []kv.Op{{Key: "d", Value: nil}}))
	if v := version("d"); v != 4 {
		t.Fatalf("after a failed, a read-only and a delete txn: version %d, want 4", v)
	}
}

func TestInvalidKeys(t *testing.T) {
	s := openT(t, t.TempDir())
	ctx := t.Context()
	for _, k := range []string{"", "a\x00b", strings.Repeat("k", bbolt.MaxKeySize+1)} {
		if err := s.Txn(ctx, nil, []kv.Op{{Key: "ok", Value: nil}, {Key: k, Value: []byte("x")}}); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("Txn op key %.20q: %v, want ErrInvalidKey", k, err)
		}
		if err := s.Txn(ctx, []kv.Cond{{Key: k}}, []kv.Op{{Key: "ok", Value: nil}}); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("Txn cond key %.20q: %v, want ErrInvalidKey", k, err)
		}
		if _, err := s.Get(ctx, "ok", k); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("Get %.20q: %v, want ErrInvalidKey", k, err)
		}
	}
	if kvs, _ := s.List(ctx, ""); len(kvs) != 0 {
		t.Fatalf("rejected txns wrote %d keys", len(kvs))
	}
}

func TestClosedStore(t *testing.T) {
	s, err := Open(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(t.Context(), "a"); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Get after Close: %v, want store.ErrUnavailable", err)
	}
	if err := s.Txn(t.Context(), nil, []kv.Op{{Key: "a"}}); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Txn after Close: %v, want store.ErrUnavailable", err)
	}
}

// rawUpdate edits the file with bbolt directly, behind the Store's back.
func rawUpdate(t *testing.T, dir string, fn func(tx *bbolt.Tx) error) {
	t.Helper()
	db, err := bbolt.Open(filepath.Join(dir, FileName), 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptData(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	rawUpdate(t, dir, func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketKV).Put([]byte("short"), []byte{1, 2, 3})
	})
	s = openT(t, dir)
	if _, err := s.Get(t.Context(), "short"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Get of a value without header: %v, want ErrCorrupt", err)
	}
	if _, err := s.List(t.Context(), ""); !errors.Is(err, ErrCorrupt) {
		t.Errorf("List over a value without header: %v, want ErrCorrupt", err)
	}
	if err := s.Txn(t.Context(), []kv.Cond{{Key: "short", Version: 1}}, []kv.Op{{Key: "short"}}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Txn cond on a value without header: %v, want ErrCorrupt", err)
	}
	s.Close()

	rawUpdate(t, dir, func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyFormat, []byte("99"))
	})
	if _, err := Open(t.Context(), dir); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "99") {
		t.Errorf("Open of an unknown format: %v, want ErrCorrupt naming the format", err)
	}
}

func TestLockTimeout(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	holder, err := Open(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()

	_, err = Open(t.Context(), dir, WithLockTimeout(300*time.Millisecond))
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("second Open: %v, want store.ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "300ms") {
		t.Fatalf("error %q does not name the file and the timeout", err)
	}

	// A ctx deadline shorter than the lock timeout wins.
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err = Open(ctx, dir)
	if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Open with a 200ms ctx: %v, want store.ErrUnavailable + DeadlineExceeded naming %s", err, path)
	}

	// Cancelling ctx ends the wait too.
	ctx, cancel = context.WithCancel(t.Context())
	time.AfterFunc(100*time.Millisecond, cancel)
	if _, err = Open(ctx, dir); !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Open with a cancelled ctx: %v, want store.ErrUnavailable + Canceled", err)
	}

	// A waiter gets the lock as soon as the holder closes, and the waits
	// given up above do not keep it.
	got := make(chan error, 1)
	go func() {
		s, err := Open(context.Background(), dir, WithLockTimeout(5*time.Second))
		if err == nil {
			err = s.Close()
		}
		got <- err
	}()
	time.Sleep(200 * time.Millisecond)
	if err := holder.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiting Open after release: %v", err)
	}
}

// The limits the store reports hold: a key of MaxKeyBytes is stored, one
// byte more is refused; there is no operation limit.
func TestLimits(t *testing.T) {
	s := openT(t, t.TempDir())
	lim := s.Limits()
	if lim.MaxOps != 0 || lim.MaxKeyBytes != bbolt.MaxKeySize {
		t.Fatalf("Limits() = %+v", lim)
	}
	key := strings.Repeat("k", lim.MaxKeyBytes)
	ops := []kv.Op{{Key: key, Value: []byte("v")}}
	if !lim.Fits(nil, ops) {
		t.Fatal("Fits refuses a key at the limit")
	}
	if err := s.Txn(t.Context(), nil, ops); err != nil {
		t.Fatalf("key of %d bytes: %v", len(key), err)
	}
	ops[0].Key += "k"
	if lim.Fits(nil, ops) {
		t.Fatal("Fits takes a key one byte too long")
	}
	if err := s.Txn(t.Context(), nil, ops); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("key of %d bytes: %v, want ErrInvalidKey", len(ops[0].Key), err)
	}
}
