package etcd_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/kv/kvtest"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
)

// server is the embedded etcd every test of the package shares; tests
// keep apart by key prefix.
var server *etcdtest.Server

func TestMain(m *testing.M) {
	s, stop := etcdtest.Shared()
	server = s
	code := m.Run()
	stop()
	os.Exit(code)
}

var prefixes atomic.Int64

// open returns a store under a prefix no other test uses.
func open(t testing.TB, mod ...func(*etcd.Config)) *etcd.Store {
	t.Helper()
	cfg := etcd.Config{
		Endpoints: []string{server.Endpoint},
		Prefix:    fmt.Sprintf("/t%d-%s", prefixes.Add(1), strings.ReplaceAll(t.Name(), "/", "_")),
	}
	for _, f := range mod {
		f(&cfg)
	}
	s, err := etcd.Open(t.Context(), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	kvtest.Run(t, func(t *testing.T) kv.Store { return open(t) })
}

func TestConformanceSerializable(t *testing.T) {
	kvtest.Run(t, func(t *testing.T) kv.Store {
		return open(t, func(c *etcd.Config) { c.Serializable = true })
	})
}

// Keys of one prefix are invisible under another, and List pages through
// more keys than one range request returns.
func TestPrefixIsolationAndPaging(t *testing.T) {
	etcd.SetPageSize(t, 1000)
	a, b := open(t), open(t)
	defer a.Close()
	defer b.Close()
	const n = 2500
	for start := 0; start < n; start += 100 {
		var ops []kv.Op
		for i := start; i < start+100; i++ {
			ops = append(ops, kv.Op{Key: fmt.Sprintf("k/%05d", i), Value: []byte("x")})
		}
		if err := a.Txn(t.Context(), nil, ops); err != nil {
			t.Fatal(err)
		}
	}
	got, err := a.List(t.Context(), "k/")
	if err != nil || len(got) != n {
		t.Fatalf("List: %d entries, err %v; want %d", len(got), err, n)
	}
	for i, e := range got {
		if e.Key != fmt.Sprintf("k/%05d", i) {
			t.Fatalf("entry %d is %q", i, e.Key)
		}
	}
	if got, err := b.List(t.Context(), ""); err != nil || len(got) != 0 {
		t.Fatalf("other prefix sees %d entries (err %v)", len(got), err)
	}
}

// An unreachable cluster fails, once the request timeout has passed, with
// store.ErrUnavailable, and the message names the endpoint, not the keys.
func TestUnreachable(t *testing.T) {
	port, err := etcdtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ep := fmt.Sprintf("http://127.0.0.1:%d", port)
	s, err := etcd.Open(t.Context(), etcd.Config{Endpoints: []string{ep}, RequestTimeout: 500 * time.Millisecond, DialTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Txn(t.Context(), []kv.Cond{{Key: "secret-key", Version: 0}}, []kv.Op{{Key: "secret-key", Value: []byte("secret-value")}})
	if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Txn: %v, want store.ErrUnavailable after the request timeout", err)
	}
	if strings.Contains(err.Error(), "secret") {
		t.Fatalf("error leaks key or value: %v", err)
	}
	if !strings.Contains(err.Error(), fmt.Sprint(port)) {
		t.Fatalf("error does not name the endpoint: %v", err)
	}
	_, err = s.Get(t.Context(), "secret-key")
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Get: %v, want store.ErrUnavailable", err)
	}
}

// A dead endpoint first in the list is skipped for a live one.
func TestFailover(t *testing.T) {
	port, err := etcdtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dead := fmt.Sprintf("127.0.0.1:%d", port)
	for range 5 { // the first endpoint is picked at random
		s := open(t, func(c *etcd.Config) { c.Endpoints = []string{dead, server.Endpoint} })
		if err := s.Txn(t.Context(), nil, []kv.Op{{Key: "k", Value: []byte("v")}}); err != nil {
			t.Fatalf("Txn with one dead endpoint: %v", err)
		}
		s.Close()
	}
}

func TestTooManyOps(t *testing.T) {
	s := open(t)
	defer s.Close()
	ops := make([]kv.Op, 200)
	for i := range ops {
		ops[i] = kv.Op{Key: fmt.Sprint(i), Value: []byte("v")}
	}
	if err := s.Txn(context.Background(), nil, ops); !errors.Is(err, etcd.ErrTooLarge) {
		t.Fatalf("200-op txn: %v, want ErrTooLarge", err)
	}
}

// The limits the store reports are the ones the real etcd enforces: a
// transaction at MaxOps compares and operations, and one at MaxTxnBytes,
// apply; one more operation or byte is refused at once with ErrTooLarge
// (etcd's own refusal of an oversized request would look transient).
func TestLimits(t *testing.T) {
	s := open(t)
	defer s.Close()
	lim := s.Limits()
	if lim.MaxOps != 128 || lim.MaxTxnBytes < 1<<20 || lim.MaxValueBytes != lim.MaxTxnBytes {
		t.Fatalf("Limits() = %+v", lim)
	}
	ctx := t.Context()
	conds := make([]kv.Cond, lim.MaxOps)
	ops := make([]kv.Op, lim.MaxOps)
	for i := range ops {
		conds[i] = kv.Cond{Key: fmt.Sprintf("c%03d", i)}
		ops[i] = kv.Op{Key: fmt.Sprintf("o%03d", i), Value: []byte("v")}
	}
	if !lim.Fits(conds, ops) {
		t.Fatal("Fits refuses a transaction at the limit")
	}
	if err := s.Txn(ctx, conds, ops); err != nil {
		t.Fatalf("transaction of %d compares and operations: %v", lim.MaxOps, err)
	}
	more := append(ops, kv.Op{Key: "one-more", Value: []byte("v")})
	if lim.Fits(conds, more) {
		t.Fatal("Fits takes one operation too many")
	}
	if err := s.Txn(ctx, nil, more); !errors.Is(err, etcd.ErrTooLarge) {
		t.Fatalf("transaction of %d operations: %v, want ErrTooLarge", len(more), err)
	}
	big := []kv.Op{{Key: "big", Value: bytes.Repeat([]byte("x"), lim.MaxTxnBytes-len("big"))}}
	if !lim.Fits(nil, big) {
		t.Fatal("Fits refuses a value at the byte limit")
	}
	if err := s.Txn(ctx, nil, big); err != nil {
		t.Fatalf("transaction of %d bytes: %v", lim.MaxTxnBytes, err)
	}
	if got, err := s.Get(ctx, "big"); err != nil || len(got[0].Value) != len(big[0].Value) {
		t.Fatalf("big value read back: %d bytes, %v", len(got[0].Value), err)
	}
	big[0].Value = append(big[0].Value, 'x')
	if lim.Fits(nil, big) {
		t.Fatal("Fits takes one byte too many")
	}
	if err := s.Txn(ctx, nil, big); !errors.Is(err, etcd.ErrTooLarge) {
		t.Fatalf("transaction of %d bytes: %v, want ErrTooLarge", lim.MaxTxnBytes+1, err)
	}
	// Twice the size etcd accepts is refused by the store, before etcd.
	huge := []kv.Op{{Key: "huge", Value: bytes.Repeat([]byte("x"), 2*lim.MaxTxnBytes)}}
	if err := s.Txn(ctx, nil, huge); !errors.Is(err, etcd.ErrTooLarge) {
		t.Fatalf("transaction of %d bytes: %v, want ErrTooLarge", 2*lim.MaxTxnBytes, err)
	}
}
