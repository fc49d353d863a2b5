package kvbacked_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
	"github.com/ipkeeper/ipkeeper/internal/store/local"
)

// server is the embedded etcd the package's tests share, each under a key
// prefix of its own.
var server *etcdtest.Server

func TestMain(m *testing.M) {
	s, stop := etcdtest.Shared()
	server = s
	code := m.Run()
	stop()
	os.Exit(code)
}

var prefixes atomic.Int64

// backend opens a fresh, empty kv.Store of one real backend.
type backend struct {
	name string
	open func(tb testing.TB) kv.Store
}

// backends are a bbolt file in a temp dir and the embedded etcd.
var backends = []backend{
	{"local", openLocal},
	{"etcd", openEtcd},
}

// openLocal opens a real bbolt datastore in a fresh temp directory.
func openLocal(tb testing.TB) kv.Store {
	tb.Helper()
	s, err := local.Open(context.Background(), tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// openEtcd opens the embedded etcd under a prefix no other test uses.
func openEtcd(tb testing.TB) kv.Store {
	tb.Helper()
	s, err := etcd.Open(context.Background(), etcd.Config{
		Endpoints: []string{server.Endpoint},
		Prefix:    fmt.Sprintf("/kvb%d-%s", prefixes.Add(1), strings.ReplaceAll(tb.Name(), "/", "_")),
	})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// counting is a kv.Store wrapper (around a real store) that counts the
// calls made through it.
type counting struct {
	kv.Store
	mu                sync.Mutex
	gets, lists, txns int
	ops               [][]kv.Op
	// beforeTxn, when set, runs before a transaction is passed on.
	beforeTxn func(conds []kv.Cond, ops []kv.Op)
	// afterTxn, when set, runs after a transaction returned.
	afterTxn func(ops []kv.Op, err error)
	// failTxn, when positive, makes that transaction (counted from 1)
	// fail without reaching the store, as if the process died before it.
	failTxn int
	// limits, when set, replace the store's (smaller transactions).
	limits *kv.Limits
}

// errCrash is the failure failTxn injects.
var errCrash = errors.New("injected crash before this transaction")

func (c *counting) Get(ctx context.Context, keys ...string) ([]kv.KeyValue, error) {
	c.mu.Lock()
	c.gets++
	c.mu.Unlock()
	return c.Store.Get(ctx, keys...)
}

func (c *counting) List(ctx context.Context, prefix string) ([]kv.KeyValue, error) {
	c.mu.Lock()
	c.lists++
	c.mu.Unlock()
	return c.Store.List(ctx, prefix)
}

func (c *counting) Txn(ctx context.Context, conds []kv.Cond, ops []kv.Op) error {
	_, err := c.TxnRevision(ctx, conds, ops)
	return err
}

func (c *counting) TxnRevision(ctx context.Context, conds []kv.Cond, ops []kv.Op) (int64, error) {
	c.mu.Lock()
	c.txns++
	c.ops = append(c.ops, ops)
	hook, after, crash := c.beforeTxn, c.afterTxn, c.failTxn > 0 && c.txns == c.failTxn
	c.mu.Unlock()
	if crash {
		return 0, errCrash
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

func (c *counting) Limits() kv.Limits {
	if c.limits != nil {
		return *c.limits
	}
	return kv.LimitsOf(c.Store)
}

// reset zeroes the counts.
func (c *counting) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gets, c.lists, c.txns, c.ops = 0, 0, 0, nil
}

// counts returns the counts.
func (c *counting) counts() (gets, lists, txns int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gets, c.lists, c.txns
}
