package kvbackedtest

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
	"github.com/ipkeeper/ipkeeper/internal/store/local"
)

// KVBackend opens a fresh, empty kv.Store of one real backend.
type KVBackend struct {
	Name string
	Open func(tb testing.TB) kv.Store
}

// KVBackends are a bbolt file in a temporary directory and a prefix of its
// own on the shared embedded etcd (Stop ends it).
var KVBackends = []KVBackend{
	{"local", OpenLocalKV},
	{"etcd", OpenEtcdKV},
}

// OpenLocalKV opens a real bbolt datastore in a fresh temporary directory;
// the test closes it.
func OpenLocalKV(tb testing.TB) kv.Store {
	tb.Helper()
	s, err := local.Open(context.Background(), tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// OpenEtcdKV opens the shared embedded etcd (started on first use) under a
// prefix no other test uses; the test closes it.
func OpenEtcdKV(tb testing.TB) kv.Store {
	tb.Helper()
	s, err := etcd.Open(context.Background(), etcd.Config{Endpoints: []string{etcdServer(tb).Endpoint}, Prefix: prefix(tb)})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// Counting is a kv.Store wrapper (around a real store) that counts the
// calls made through it, and can run hooks around its transactions or
// fail one as if the process died before it.
type Counting struct {
	kv.Store
	mu                sync.Mutex
	gets, lists, txns int
	ops               [][]kv.Op
	// BeforeTxn, when set, runs before a transaction is passed on.
	BeforeTxn func(conds []kv.Cond, ops []kv.Op)
	// AfterTxn, when set, runs after a transaction returned.
	AfterTxn func(ops []kv.Op, err error)
	// FailTxn, when positive, makes that transaction (counted from 1)
	// fail with ErrCrash without reaching the store.
	FailTxn int
	// TxnLimits, when set, replace the store's (smaller transactions).
	TxnLimits *kv.Limits
}

// ErrCrash is the failure FailTxn injects.
var ErrCrash = errors.New("injected crash before this transaction")

func (c *Counting) Get(ctx context.Context, keys ...string) ([]kv.KeyValue, error) {
	c.mu.Lock()
	c.gets++
	c.mu.Unlock()
	return c.Store.Get(ctx, keys...)
}

func (c *Counting) List(ctx context.Context, prefix string) ([]kv.KeyValue, error) {
	c.mu.Lock()
	c.lists++
	c.mu.Unlock()
	return c.Store.List(ctx, prefix)
}

func (c *Counting) Txn(ctx context.Context, conds []kv.Cond, ops []kv.Op) error {
	_, err := c.TxnRevision(ctx, conds, ops)
	return err
}

func (c *Counting) TxnRevision(ctx context.Context, conds []kv.Cond, ops []kv.Op) (int64, error) {
	c.mu.Lock()
	c.txns++
	c.ops = append(c.ops, ops)
	hook, after, crash := c.BeforeTxn, c.AfterTxn, c.FailTxn > 0 && c.txns == c.FailTxn
	c.mu.Unlock()
	if crash {
		return 0, ErrCrash
	}
	if hook != nil {
		hook(conds, ops)
	}
	rev, err := kv.TxnRevision(ctx, c.Store, conds, ops)
	if after != nil {
		after(ops, err)
	}
	return rev, err
}

func (c *Counting) Limits() kv.Limits {
	if c.TxnLimits != nil {
		return *c.TxnLimits
	}
	return kv.LimitsOf(c.Store)
}

// Reset zeroes the counts.
func (c *Counting) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gets, c.lists, c.txns, c.ops = 0, 0, 0, nil
}

// Counts returns the counts since the last Reset.
func (c *Counting) Counts() (gets, lists, txns int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gets, c.lists, c.txns
}

// Ops returns the operations of every transaction since the last Reset.
func (c *Counting) Ops() [][]kv.Op {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ops
}
