package datastore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
)

func etcdDS(prefix string) config.Datastore {
	return config.Datastore{Type: config.DatastoreEtcd, Endpoints: []string{"http://127.0.0.1:1"},
		Prefix: prefix, RequestTimeout: 100 * time.Millisecond}
}

// Two plugin opens of one etcd datastore on a node take turns on the node
// lock; waiting past three request timeouts is store.ErrUnavailable.
// Another datastore has its own lock, and a long-running process's open
// takes none.
func TestNodeLock(t *testing.T) {
	t.Setenv(LockDirEnv, t.TempDir())
	ctx := t.Context()
	srv := etcdtest.ForTest(t, nil)
	ds := func(prefix string) config.Datastore {
		return config.Datastore{Type: config.DatastoreEtcd, Endpoints: []string{srv.Endpoint},
			Prefix: prefix, RequestTimeout: 500 * time.Millisecond}
	}
	plugin := Options{Plugin: true}
	for _, p := range []string{"/a", "/b"} { // marked: a plugin open is one Get
		s, err := Open(ctx, ds(p), Options{})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	first, err := Open(ctx, ds("/a"), plugin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, ds("/a"), plugin); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("second plugin Open while locked: %v, want store.ErrUnavailable", err)
	}
	other, err := Open(ctx, ds("/b"), plugin)
	if err != nil {
		t.Fatalf("plugin Open of another prefix: %v", err)
	}
	other.Close()
	shared, err := Open(ctx, ds("/a"), Options{})
	if err != nil {
		t.Fatalf("shared Open while locked: %v", err)
	}
	shared.Close()
	done := make(chan error, 1)
	go func() {
		s, err := Open(ctx, ds("/a"), plugin)
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
		t.Fatalf("plugin Open waiting for the lock: %v", err)
	}
}

// An unreachable etcd wraps store.ErrUnavailable; bad local paths keep
// the local package's ErrBadPath message; an unknown type is refused.
func TestOpenErrors(t *testing.T) {
	t.Setenv(LockDirEnv, t.TempDir())
	ctx := t.Context()
	for _, plugin := range []bool{false, true} {
		_, err := Open(ctx, etcdDS("/down"), Options{Plugin: plugin})
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("Open(Plugin: %v) of an unreachable etcd: %v, want store.ErrUnavailable", plugin, err)
		}
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ds := config.Datastore{Type: config.DatastoreLocal, Path: file}
	_, openErr := openKV(ctx, ds)
	_, err := Open(ctx, ds, Options{Plugin: true})
	if !errors.Is(err, ErrBadPath) || openErr == nil || err.Error() != openErr.Error() || !strings.Contains(err.Error(), file) {
		t.Errorf("Open of a file as the local directory: %v; local.Open says %v", err, openErr)
	}
	if _, err := Open(ctx, config.Datastore{Type: "consul"}, Options{Plugin: true}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("unknown type: %v", err)
	}
}

// A binary that does not link kubeopen (this test's) refuses a kubernetes
// datastore with ErrKubernetesNotLinked, which the plugin hands to its
// sibling ipkeeper-kube; local and etcd do not need it.
func TestOpenKubernetesNotLinked(t *testing.T) {
	if KubernetesLinked() {
		t.Fatal("kubeopen is linked into the datastore package's tests")
	}
	_, err := Open(t.Context(), config.Datastore{Type: config.DatastoreKubernetes, Kubeconfig: "/nonexistent"}, Options{Plugin: true})
	if !errors.Is(err, ErrKubernetesNotLinked) {
		t.Fatalf("Open(kubernetes) without kubeopen: %v, want ErrKubernetesNotLinked", err)
	}
}
