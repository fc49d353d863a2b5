// Package kvbackedtest gives tests the typed store on both of its real
// kv backends — a bbolt file and an embedded etcd — so that a package's
// tests run every case on each without a copy of the opening code.
package kvbackedtest

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
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
// of each backend: a bbolt file in a temporary directory, and a prefix of
// its own on an embedded etcd that the test binary shares (started on
// first use; Stop ends it).
func Backends(t *testing.T, fn func(t *testing.T, s *kvbacked.Store)) {
	t.Helper()
	t.Run("local", func(t *testing.T) {
		s, err := kvbacked.OpenLocal(t.Context(), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		fn(t, s)
	})
	t.Run("etcd", func(t *testing.T) {
		once.Do(func() { server, startErr = etcdtest.Start("", nil) })
		if startErr != nil {
			t.Fatal(startErr)
		}
		s, err := kvbacked.OpenEtcd(t.Context(), etcd.Config{
			Endpoints: []string{server.Endpoint},
			Prefix:    fmt.Sprintf("/kvb%d-%s", prefixes.Add(1), strings.ReplaceAll(t.Name(), "/", "_")),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		fn(t, s)
	})
}

// Stop ends the shared etcd, if Backends or OpenEtcd started one; call it from
// TestMain after m.Run.
func Stop() {
	if server != nil {
		server.Close()
	}
}
