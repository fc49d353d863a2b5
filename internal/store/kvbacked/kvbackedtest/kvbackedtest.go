// Package kvbackedtest gives tests the typed store on both of its real
// kv backends — a bbolt file and an embedded etcd — opened by
// datastore.Open (Backends), so that a package's tests run every case on
// each without a copy of the opening code. Tests of the kv layer itself
// (the typed store's keys, the migration) open the raw kv.Store of either
// backend with KVBackends, OpenLocalKV and OpenEtcdKV.
package kvbackedtest

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
)

var (
	once     sync.Once
	server   *etcdtest.Server
	startErr error
	prefixes atomic.Int64
)

// Backends runs fn, as subtests "local" and "etcd", on a fresh typed store
// of each backend, opened by datastore.Open as a long-running process
// opens it: a bbolt file in a temporary directory, and a prefix of its
// own on an embedded etcd that the test binary shares (started on first
// use; Stop ends it).
func Backends(t *testing.T, fn func(t *testing.T, s *kvbacked.Store)) {
	t.Helper()
	t.Run("local", func(t *testing.T) {
		fn(t, open(t, config.Datastore{Type: config.DatastoreLocal, Path: t.TempDir()}))
	})
	t.Run("etcd", func(t *testing.T) {
		fn(t, open(t, config.Datastore{Type: config.DatastoreEtcd, Endpoints: []string{etcdServer(t).Endpoint}, Prefix: prefix(t)}))
	})
}

// open opens ds with datastore.Open; the test closes it when it ends.
func open(t *testing.T, ds config.Datastore) *kvbacked.Store {
	s, err := datastore.Open(t.Context(), ds, datastore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s.(*kvbacked.Store)
}

// etcdServer returns the embedded etcd the test binary shares, started on
// first use.
func etcdServer(tb testing.TB) *etcdtest.Server {
	tb.Helper()
	once.Do(func() { server, startErr = etcdtest.Start("", nil) })
	if startErr != nil {
		tb.Fatal(startErr)
	}
	return server
}

// prefix is an etcd prefix no other test uses.
func prefix(tb testing.TB) string {
	return fmt.Sprintf("/kvb%d-%s", prefixes.Add(1), strings.ReplaceAll(tb.Name(), "/", "_"))
}

// Stop ends the shared etcd, if Backends or OpenEtcdKV started one; call
// it from TestMain after m.Run.
func Stop() {
	if server != nil {
		server.Close()
	}
}
