package datastore

import (
	"errors"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/kv"
)

func etcdDS(prefix string) config.Datastore {
	return config.Datastore{Type: config.DatastoreEtcd, Endpoints: []string{"http://127.0.0.1:1"},
		Prefix: prefix, RequestTimeout: 100 * time.Millisecond}
}

// Two opens of one etcd datastore on a node take turns on the node lock;
// waiting past three request timeouts is kv.ErrUnavailable. Another
// datastore has its own lock, and OpenShared takes none.
func TestNodeLock(t *testing.T) {
	t.Setenv(LockDirEnv, t.TempDir())
	ctx := t.Context()
	first, err := Open(ctx, etcdDS("/a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, etcdDS("/a")); !errors.Is(err, kv.ErrUnavailable) {
		t.Fatalf("second Open while locked: %v, want kv.ErrUnavailable", err)
	}
	other, err := Open(ctx, etcdDS("/b"))
	if err != nil {
		t.Fatalf("Open of another prefix: %v", err)
	}
	other.Close()
	shared, err := OpenShared(ctx, etcdDS("/a"))
	if err != nil {
		t.Fatalf("OpenShared while locked: %v", err)
	}
	shared.Close()
	done := make(chan error, 1)
	go func() {
		s, err := Open(ctx, etcdDS("/a"))
		if err == nil {
			s.Close()
		}
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Open waiting for the lock: %v", err)
	}
}
