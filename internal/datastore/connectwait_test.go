package datastore

import (
	"strings"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
)

// A plugin open of etcd connects while it waits for the node lock: the
// node's other plugin process, holding the lock, does not wait for that
// connection after it releases it.
func TestPluginOpenConnectsWhileWaiting(t *testing.T) {
	t.Setenv(LockDirEnv, t.TempDir())
	ctx := t.Context()
	srv := etcdtest.ForTest(t, nil)
	p := etcdtest.NewProxy(t, strings.TrimPrefix(srv.Endpoint, "http://"))
	ds := config.Datastore{Type: config.DatastoreEtcd, Endpoints: []string{"http://" + p.Addr()},
		Prefix: "/w", RequestTimeout: 5 * time.Second}
	s, err := Open(ctx, ds, Options{}) // marks the store
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	first, err := Open(ctx, ds, Options{Plugin: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.ListPools(ctx); err != nil {
		t.Fatal(err)
	}
	n := p.Forwarded()
	done := make(chan error, 1)
	go func() {
		s, err := Open(ctx, ds, Options{Plugin: true})
		if err == nil {
			_, err = s.ListPools(ctx)
			s.Close()
		}
		done <- err
	}()
	// The waiting open's connection is made while the lock is held.
	p.WaitForwarded(t, n+1)
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("plugin open that waited for the lock: %v", err)
	}
	if got := p.Forwarded(); got != n+1 {
		t.Fatalf("%d connections after the waiting open, want %d: its requests used the connection it made while waiting", got, n+1)
	}
}
