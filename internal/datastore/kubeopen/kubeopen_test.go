package kubeopen

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kube"
)

// osV4 is the pool of the objects the test writes.
var osV4 = ipam.Pool{Name: "v4", CIDR: netip.MustParsePrefix("10.20.0.0/16"), BlockSize: 26}

// datastore.Open of the kubernetes datastore (with this package linked)
// with the node ServiceAccount's kubeconfig works against a real API server with the shipped CRDs and
// RBAC; a plugin open holds the node lock of that kubeconfig and
// partition until Close (a second one waits and runs out as
// ErrUnavailable; a shared open and another partition do not wait); a
// kubeconfig path that cannot be loaded is named in the error and
// creates no lock file.
func TestOpenKubernetes(t *testing.T) {
	srv := kubetest.Start(t)
	lockDir := t.TempDir()
	t.Setenv(datastore.LockDirEnv, lockDir)
	ctx := t.Context()
	ds := config.Datastore{Type: config.DatastoreKubernetes, Prefix: "openstore",
		Kubeconfig:     srv.NodeKubeconfig(t, "node-a"),
		RequestTimeout: 10 * time.Second}

	s, err := datastore.Open(ctx, ds, datastore.Options{Plugin: true})
	if err != nil {
		t.Fatal(err)
	}
	n := store.Node{Name: "node-a", Blocks: []ipam.Block{ipam.NewBlock(osV4, osV4.BlockAt(0), "node-a")}}
	if _, err := s.CreateClaim(ctx, store.Claim{BlockRef: store.BlockRef{Pool: osV4.Name, CIDR: osV4.BlockAt(0)}, Node: "node-a"}); err != nil {
		t.Fatalf("CreateClaim as the node ServiceAccount: %v", err)
	}
	if _, err := s.CreateNode(ctx, n); err != nil {
		t.Fatalf("CreateNode as the node ServiceAccount: %v", err)
	}
	if got, err := s.GetNode(ctx, "node-a"); err != nil || len(got.Blocks) != 1 {
		t.Fatalf("GetNode: %+v, %v", got, err)
	}
	locks, _ := filepath.Glob(filepath.Join(lockDir, "kube-*.lock"))
	if len(locks) != 1 {
		t.Fatalf("node lock files %v, want one kube-*.lock in %s", locks, lockDir)
	}
	lock := locks[0]
	if fi, err := os.Stat(lock); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("node lock file %s: %v", lock, err)
	}

	impatient := ds // the same lock, waited for 3 × 100 ms
	impatient.RequestTimeout = 100 * time.Millisecond
	if _, err := datastore.Open(ctx, impatient, datastore.Options{Plugin: true}); !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), lock) {
		t.Fatalf("second plugin open while the lock is held: %v, want ErrUnavailable naming %s", err, lock)
	}
	shared, err := datastore.Open(ctx, ds, datastore.Options{})
	if err != nil {
		t.Fatalf("shared open while the lock is held: %v", err)
	}
	if _, err := shared.GetNode(ctx, "node-a"); err != nil {
		t.Fatalf("shared GetNode: %v", err)
	}
	shared.Close()
	other := ds
	other.Prefix = "openstore2"
	o, err := datastore.Open(ctx, other, datastore.Options{Plugin: true})
	if err != nil {
		t.Fatalf("plugin open of another partition: %v", err)
	}
	o.Close()

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = datastore.Open(ctx, ds, datastore.Options{Plugin: true})
	if err != nil {
		t.Fatalf("plugin open after Close released the lock: %v", err)
	}
	if _, err := s.GetNode(ctx, "node-a"); err != nil {
		t.Fatal(err)
	}
	s.Close()

	badDir := t.TempDir()
	t.Setenv(datastore.LockDirEnv, badDir)
	bad := ds
	bad.Kubeconfig = filepath.Join(t.TempDir(), "no-such.kubeconfig")
	if _, err := datastore.Open(ctx, bad, datastore.Options{Plugin: true}); !errors.Is(err, kube.ErrBadConfig) || !strings.Contains(err.Error(), bad.Kubeconfig) {
		t.Fatalf("missing kubeconfig: %v, want kube.ErrBadConfig naming %s", err, bad.Kubeconfig)
	}
	if es, _ := os.ReadDir(badDir); len(es) != 0 {
		t.Fatalf("a refused open created %v in the lock directory", es)
	}
}

// A plugin open of the kubernetes datastore checks the node lock
// directory as Open does for etcd: one others may write is refused with
// datastore.ErrBadPath naming it, and no lock file is created. (No API server is
// needed: kube.Open sends nothing.)
func TestOpenStoreBadLockDir(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "locks")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	t.Setenv(datastore.LockDirEnv, dir)
	ds := config.Datastore{Type: config.DatastoreKubernetes, Kubeconfig: kubeconfig}
	if _, err := datastore.Open(t.Context(), ds, datastore.Options{Plugin: true}); !errors.Is(err, datastore.ErrBadPath) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("plugin open with a world-writable lock directory: %v, want datastore.ErrBadPath naming %s", err, dir)
	}
	if es, _ := os.ReadDir(dir); len(es) != 0 {
		t.Fatalf("a refused open created %v", es)
	}
	s, err := datastore.Open(t.Context(), ds, datastore.Options{}) // shared: no lock, nothing checked or sent
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}
