// Package datastore opens the datastore a config's `datastore` object
// names, as the typed store (store.Store, docs/STORAGE.md): Open is the
// one way every binary and test opens one. It owns what an open involves
// beyond the backend's own client: this node's lock for plugin calls, the
// plugin's hint file on etcd, the migration of a local or etcd store of
// the first layout, and the Kubernetes backend's registration by the
// binaries that link it (kubeopen).
package datastore

import (
	"context"
	"errors"
	"fmt"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked/migrate"
	"github.com/ipkeeper/ipkeeper/internal/store/local"
)

// DefaultLocalPath is where the local store lives when no path is given.
const DefaultLocalPath = "/var/lib/cni/ipkeeper"

// ErrBadPath wraps every error about a datastore path or node lock
// directory that cannot be used safely (missing or not a
// directory, a symbolic link or special file where a file belongs, owned or
// writable by another user); the message names the path and the fix. It is
// local.ErrBadPath, so errors of either package match it.
var ErrBadPath = local.ErrBadPath

// ErrUnsupported means the datastore type is not known.
var ErrUnsupported = errors.New("unsupported datastore type")

// Warm names the objects an opener reads first (a node object, pools);
// Warmed is what the open read of them (kvbacked.Warm, kvbacked.Warmed).
type (
	Warm   = kvbacked.Warm
	Warmed = kvbacked.Warmed
)

// Options say how Open opens a datastore. The zero value is the opening
// of a long-running process (the agent, the controller, the admin CLI,
// the map): without the node lock, so that it never stalls the node's
// plugin calls.
type Options struct {
	// Plugin opens the datastore as a CNI plugin call: on etcd and the
	// Kubernetes API under this node's lock for that datastore, held
	// until Close (nodelock.go), and on etcd with the node's hint file
	// when Warm.Node is set (hintfile.go).
	Plugin bool
	// Warm names objects that a local or etcd open reads with the layout
	// marker, in the same request.
	Warm Warm
	// Warmed, when not nil, is set to what the open read of Warm's
	// objects (Warmed.OK false when it did not: no Warm, a store migrated
	// by this open, or the Kubernetes API, which reads nothing on open).
	Warmed *Warmed
}

// Open opens the typed datastore ds names.
//
// local and etcd: the backend's kv.Store (local.Open: the file lock, path
// checks and fsync are the local package's; etcd.Open) as kvbacked's
// typed store. A store without the layout marker, or with the marker of
// the layout that kept node objects whole, is migrated before it is
// returned (migrate.EnsureRead: the first layout converted, or only the
// marker written, for an empty store or objects stored before markers;
// whole node objects split into parts), so nothing uses the typed
// objects of an unconverted store. Every open
// pays one read of the marker (one Get: one round trip on etcd), which
// also reads opts.Warm's objects; only an unmarked store pays more. A
// plugin open of etcd connects to etcd while it waits for the node lock
// and sends its first request once it holds it.
//
// kubernetes: the opener package kubeopen registers (kube.go): kube.Open
// with ds.Kubeconfig (empty: in-cluster) and ds.Prefix as the partition;
// it sends nothing. A plugin open loads the kubeconfig, then takes the
// node lock.
//
// Errors: an unreachable backend or a lock not taken in time wraps
// store.ErrUnavailable; paths that cannot be used safely wrap ErrBadPath
// and name the path and the fix; a kubeconfig that cannot be loaded wraps
// kube.ErrBadConfig and names its path.
func Open(ctx context.Context, ds config.Datastore, opts Options) (store.Store, error) {
	if opts.Warmed != nil {
		*opts.Warmed = Warmed{}
	}
	switch ds.Type {
	case "", config.DatastoreLocal, config.DatastoreEtcd:
		return openKVBacked(ctx, ds, opts)
	case config.DatastoreKubernetes:
		return openKube(ctx, ds, opts.Plugin)
	default:
		return nil, fmt.Errorf("%w: %q", ErrUnsupported, ds.Type)
	}
}

// openKVBacked is Open of a local or etcd datastore.
func openKVBacked(ctx context.Context, ds config.Datastore, opts Options) (store.Store, error) {
	kvs, err := openKV(ctx, ds)
	if err != nil {
		return nil, err
	}
	var unlock func()
	if es, ok := kvs.(*etcd.Store); ok && opts.Plugin {
		// Connect while waiting for the lock: the node's other plugin
		// processes wait only for this one's requests.
		es.Connect(ctx)
		if unlock, err = nodeLock(ctx, lockName(etcdConfig(ds)), ds.RequestTimeout); err != nil {
			_ = kvs.Close()
			return nil, err
		}
	}
	w := opts.Warm
	var hint string
	if unlock != nil && w.Node != "" {
		hint = hintPath(lockDir(), lockName(etcdConfig(ds)), w.Node)
		w.Hint = loadHint(hint, w.Node)
	}
	var s *kvbacked.Store
	var warmed Warmed
	ok := false
	if w.Hint != nil {
		s = kvbacked.New(kvs)
		warmed, ok = s.TakeHint(w)
	}
	if !ok {
		if s, warmed, err = openTyped(ctx, kvs, w); err != nil {
			_ = kvs.Close()
			release(unlock)
			return nil, err
		}
	}
	if opts.Warmed != nil {
		*opts.Warmed = warmed
	}
	if unlock == nil {
		return s, nil
	}
	l := &locked{Store: s, unlock: unlock}
	if hint != "" {
		s.Track(w.Node, warmed.Hint)
		l.hint = &hintFile{s: s, path: hint, id: warmed.Hint.Store, at: warmed.Hint.StoreAt}
	}
	return l, nil
}

// openKV opens the kv.Store of a local or etcd datastore, without the
// node lock.
func openKV(ctx context.Context, ds config.Datastore) (kv.Store, error) {
	if ds.Type == config.DatastoreEtcd {
		return etcd.Open(ctx, etcdConfig(ds))
	}
	path := ds.Path
	if path == "" {
		path = DefaultLocalPath
	}
	return local.Open(ctx, path)
}

func etcdConfig(ds config.Datastore) etcd.Config {
	return etcd.Config{
		Endpoints: ds.Endpoints, CAFile: ds.CAFile, CertFile: ds.CertFile, KeyFile: ds.KeyFile,
		Prefix: ds.Prefix, DialTimeout: ds.DialTimeout, RequestTimeout: ds.RequestTimeout,
	}
}

// openTyped returns the typed store on kvs, migrating it first when it
// has no layout marker or the marker of the layout before this one
// (migrate.EnsureRead), and what it read of w's objects
// with the marker. A marked store costs one Get.
func openTyped(ctx context.Context, kvs kv.Store, w Warm) (*kvbacked.Store, Warmed, error) {
	layout, warmed, err := kvbacked.ReadLayoutWarm(ctx, kvs, w)
	if err != nil {
		return nil, Warmed{}, fmt.Errorf("datastore: %w", err)
	}
	if layout == kvbacked.LayoutTyped {
		return kvbacked.New(kvs), warmed, nil
	}
	if err := migrate.EnsureRead(ctx, kvs, layout); err != nil {
		return nil, Warmed{}, fmt.Errorf("datastore: %w", err)
	}
	return kvbacked.New(kvs), Warmed{}, nil
}
