package datastore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kube"
)

// OpenStore of the kubernetes datastore with the node ServiceAccount's
// kubeconfig works against a real API server with the shipped CRDs and
// RBAC; a plugin open holds the node lock of that kubeconfig and
// partition until Close (a second one waits and runs out as
// ErrUnavailable; a shared open and another partition do not wait); a
// kubeconfig path that cannot be loaded is named in the error and
// creates no lock file.
func TestOpenStoreKubernetes(t *testing.T) {
	srv := kubetest.Start(t)
	lockDir := t.TempDir()
	t.Setenv(LockDirEnv, lockDir)
	ctx := t.Context()
	ds := config.Datastore{Type: config.DatastoreKubernetes, Prefix: "openstore",
		Kubeconfig:     srv.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-node"),
		RequestTimeout: 10 * time.Second}

	s, err := OpenStore(ctx, ds, false)
	if err != nil {
		t.Fatal(err)
	}
	n := store.Node{Name: "node-a", Blocks: []ipam.Block{ipam.NewBlock(osV4, osV4.BlockAt(0), "node-a")}}
	if _, err := s.CreateNode(ctx, n); err != nil {
		t.Fatalf("CreateNode as the node ServiceAccount: %v", err)
	}
	if got, err := s.GetNode(ctx, "node-a"); err != nil || len(got.Blocks) != 1 {
		t.Fatalf("GetNode: %+v, %v", got, err)
	}
	lock := filepath.Join(lockDir, kubeLockName(ds))
	if fi, err := os.Stat(lock); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("node lock file %s: %v", lock, err)
	}

	impatient := ds // the same lock, waited for 3 × 100 ms
	impatient.RequestTimeout = 100 * time.Millisecond
	if _, err := OpenStore(ctx, impatient, false); !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), lock) {
		t.Fatalf("second plugin open while the lock is held: %v, want ErrUnavailable naming %s", err, lock)
	}
	shared, err := OpenStore(ctx, ds, true)
	if err != nil {
		t.Fatalf("shared open while the lock is held: %v", err)
	}
	if _, err := shared.GetNode(ctx, "node-a"); err != nil {
		t.Fatalf("shared GetNode: %v", err)
	}
	shared.Close()
	other := ds
	other.Prefix = "openstore2"
	o, err := OpenStore(ctx, other, false)
	if err != nil {
		t.Fatalf("plugin open of another partition: %v", err)
	}
	o.Close()

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = OpenStore(ctx, ds, false)
	if err != nil {
		t.Fatalf("plugin open after Close released the lock: %v", err)
	}
	if _, err := s.GetNode(ctx, "node-a"); err != nil {
		t.Fatal(err)
	}
	s.Close()

	badDir := t.TempDir()
	t.Setenv(LockDirEnv, badDir)
	bad := ds
	bad.Kubeconfig = filepath.Join(t.TempDir(), "no-such.kubeconfig")
	if _, err := OpenStore(ctx, bad, false); !errors.Is(err, kube.ErrBadConfig) || !strings.Contains(err.Error(), bad.Kubeconfig) {
		t.Fatalf("missing kubeconfig: %v, want kube.ErrBadConfig naming %s", err, bad.Kubeconfig)
	}
	if es, _ := os.ReadDir(badDir); len(es) != 0 {
		t.Fatalf("a refused open created %v in the lock directory", es)
	}
}
