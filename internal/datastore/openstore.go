package datastore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/filetrust"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked/migrate"
)

// OpenStore opens the typed datastore (store.Store, docs/STORAGE.md) ds
// names. shared selects the opening of long-running processes (the admin
// CLI, the controller): without the node lock, as OpenShared; otherwise
// it is the plugin's, under this node's lock for that datastore, as Open.
//
// local and etcd: the kv.Store Open or OpenShared returns (the same file
// lock, node lock and path checks), as kvbacked's typed
// store. A store without the layout marker is migrated before it is
// returned (migrate.Ensure: the first layout converted, or only the
// marker written, for an empty store or objects stored before markers),
// so nothing uses the typed objects of an unconverted store.
// Every open pays one read of the marker (one Get: one round trip on
// etcd); only an unmarked store pays more.
//
// kubernetes: the opener package kubeopen registers (a binary that
// imports it; others get ErrKubernetesNotLinked): kube.Open with
// ds.Kubeconfig (empty: in-cluster) and ds.Prefix as the partition; it
// sends nothing. A plugin open takes the node lock named after the
// kubeconfig's path and the partition first.
//
// Errors: an unreachable backend or a lock not taken in time wraps
// store.ErrUnavailable (and kv.ErrUnavailable for local and etcd); paths
// that cannot be used safely keep their ErrBadPath messages; a kubeconfig
// that cannot be loaded wraps kube.ErrBadConfig and names its path.
func OpenStore(ctx context.Context, ds config.Datastore, shared bool) (store.Store, error) {
	s, _, err := OpenStoreWarm(ctx, ds, shared, Warm{})
	return s, err
}

// Warm names the objects an opener reads first (a node object, pools);
// Warmed is what the open read of them (kvbacked.Warm, kvbacked.Warmed).
type (
	Warm   = kvbacked.Warm
	Warmed = kvbacked.Warmed
)

// OpenStoreWarm is OpenStore that, on local and etcd, reads w's objects
// with the layout marker, in the same request, and returns them (Warmed.OK
// false when it did not: a store migrated by this open, or the kubernetes
// datastore, which reads nothing on open). A plugin open of etcd (not
// shared, w.Node set) takes w's node object from the node's hint file
// instead of reading it, when the file is of this store, and its Close
// leaves the object as last read or written there (hintfile.go).
func OpenStoreWarm(ctx context.Context, ds config.Datastore, shared bool, w Warm) (store.Store, Warmed, error) {
	switch ds.Type {
	case "", config.DatastoreLocal, config.DatastoreEtcd:
		open := Open
		if shared {
			open = OpenShared
		}
		kvs, err := open(ctx, ds)
		if err != nil {
			return nil, Warmed{}, unavailable(err)
		}
		var hint string
		if !shared && ds.Type == config.DatastoreEtcd && w.Node != "" {
			hint = hintPath(lockDir(), lockName(etcdConfig(ds)), w.Node)
			w.Hint = loadHint(hint, w.Node)
		}
		if w.Hint != nil {
			s := kvbacked.New(kvs)
			if warmed, ok := s.TakeHint(w); ok {
				s.Track(w.Node, warmed.Hint)
				return &hintedStore{Store: s, path: hint, id: warmed.Hint.Store, at: warmed.Hint.StoreAt}, warmed, nil
			}
		}
		s, warmed, err := openTyped(ctx, kvs, w)
		if err != nil {
			_ = kvs.Close()
			return nil, Warmed{}, err
		}
		if hint == "" {
			return s, warmed, nil
		}
		s.Track(w.Node, warmed.Hint)
		return &hintedStore{Store: s, path: hint, id: warmed.Hint.Store, at: warmed.Hint.StoreAt}, warmed, nil
	case config.DatastoreKubernetes:
		s, err := openKube(ctx, ds, shared)
		return s, Warmed{}, err
	default:
		return nil, Warmed{}, fmt.Errorf("%w: %q", ErrUnsupported, ds.Type)
	}
}

// openTyped returns the typed store on kvs, migrating it first when it
// has no layout marker (migrate.Ensure), and what it read of w's objects
// with the marker. A marked store costs one Get.
func openTyped(ctx context.Context, kvs kv.Store, w Warm) (*kvbacked.Store, Warmed, error) {
	layout, warmed, err := kvbacked.ReadLayoutWarm(ctx, kvs, w)
	if err != nil {
		return nil, Warmed{}, fmt.Errorf("datastore: %w", err)
	}
	if layout == kvbacked.LayoutTyped {
		return kvbacked.New(kvs), warmed, nil
	}
	if err := migrate.Ensure(ctx, kvs); err != nil {
		return nil, Warmed{}, fmt.Errorf("datastore: %w", err)
	}
	return kvbacked.New(kvs), Warmed{}, nil
}

// unavailable adds store.ErrUnavailable to a kv.ErrUnavailable error;
// others (bad paths, bad configuration) pass unchanged.
func unavailable(err error) error {
	if errors.Is(err, kv.ErrUnavailable) && !errors.Is(err, store.ErrUnavailable) {
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return err
}

// ErrKubernetesNotLinked means the binary cannot open a kubernetes
// datastore: the client library's package initialization costs a
// short-lived process several times its own start-up (docs/BENCHMARKS.md),
// so only binaries that import kubeopen carry it
// (the plugin hands such configs to its sibling ipkeeper-kube).
var ErrKubernetesNotLinked = errors.New("this binary does not include the kubernetes datastore")

// kubeOpen opens a Kubernetes datastore's client; nil until kubeopen is
// linked.
var kubeOpen func(shared bool, ds config.Datastore) (store.Store, error)

// RegisterKubernetes installs the opener of kubernetes datastores; the
// package kubeopen calls it from its init. shared tells a long-running
// process's open from the plugin's.
func RegisterKubernetes(open func(shared bool, ds config.Datastore) (store.Store, error)) {
	kubeOpen = open
}

// KubernetesLinked reports whether this binary can open a kubernetes
// datastore.
func KubernetesLinked() bool { return kubeOpen != nil }

// openKube opens the Kubernetes datastore; a plugin open holds the node
// lock until Close. The kubeconfig is loaded before the lock is taken, so
// a bad one creates nothing.
func openKube(ctx context.Context, ds config.Datastore, shared bool) (store.Store, error) {
	if kubeOpen == nil {
		return nil, fmt.Errorf("%w (import internal/datastore/kubeopen)", ErrKubernetesNotLinked)
	}
	ks, err := kubeOpen(shared, ds)
	if err != nil {
		return nil, err
	}
	if shared {
		return ks, nil
	}
	dir := lockDir()
	if _, err := filetrust.PrepareDir(lockDirWhat, dir); err != nil {
		_ = ks.Close()
		return nil, err
	}
	wait := 3 * ds.RequestTimeout
	if wait <= 0 {
		wait = 3 * config.DefaultRequestTimeout
	}
	unlock, err := nodeLock(ctx, dir, kubeLockName(ds), wait)
	if err != nil {
		_ = ks.Close()
		return nil, unavailable(err)
	}
	return &lockedTyped{Store: ks, unlock: unlock}, nil
}

// kubeLockName names the node lock of one Kubernetes datastore: the same
// kubeconfig path and partition always map to the same file, others to
// other files.
func kubeLockName(ds config.Datastore) string {
	path := ds.Kubeconfig
	if path != "" {
		if abs, err := filepath.Abs(path); err == nil {
			path = filepath.Clean(abs)
		}
	}
	sum := sha256.Sum256([]byte(path + "\x00" + ds.Prefix))
	return "kube-" + hex.EncodeToString(sum[:8]) + ".lock"
}

// lockedTyped releases the node lock when the store is closed.
type lockedTyped struct {
	store.Store
	unlock func()
}

// Close closes the store and then releases the node lock.
func (l *lockedTyped) Close() error {
	err := l.Store.Close()
	if l.unlock != nil {
		l.unlock()
		l.unlock = nil
	}
	return err
}
