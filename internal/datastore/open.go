// Package datastore opens the datastore a config's `datastore` object
// names: the typed store (OpenStore) and, for local and etcd, the kv.Store
// it is kept in (Open, OpenShared).
package datastore

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/filetrust"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
	"github.com/ipkeeper/ipkeeper/internal/store/local"
)

// DefaultLocalPath is where the local store lives when no path is given.
const DefaultLocalPath = "/var/lib/cni/ipkeeper"

// DefaultLockDir holds the node-local lock files of shared datastores;
// $IPKEEPER_LOCK_DIR overrides it.
const DefaultLockDir = "/run/ipkeeper"

// LockDirEnv names the environment variable that overrides DefaultLockDir.
const LockDirEnv = "IPKEEPER_LOCK_DIR"

// ErrBadPath wraps every error about a datastore path or node lock
// directory that cannot be used safely (missing or not a
// directory, a symbolic link or special file where a file belongs, owned or
// writable by another user); the message names the path and the fix. It is
// local.ErrBadPath, so errors of either package match it.
var ErrBadPath = local.ErrBadPath

// ErrUnsupported means the datastore type is not known.
var ErrUnsupported = errors.New("unsupported datastore type")

// Open opens the datastore ds describes.
//
// For etcd it first takes this node's exclusive lock for that datastore (a
// flock on a file under $IPKEEPER_LOCK_DIR, default DefaultLockDir), held
// until Close. The lock directory and the lock file must be safe for root
// to use (owned by root or the caller, not writable by others, no symbolic
// link or special file as the lock file): anything else fails with
// ErrBadPath naming the path and the fix. Under the lock, plugin
// processes on one node take turns instead of fighting over the node's own
// blocks, so transaction conflicts come only from other nodes. Waiting for the lock is bounded by three request timeouts
// and by ctx; running out wraps kv.ErrUnavailable.
func Open(ctx context.Context, ds config.Datastore) (kv.Store, error) {
	switch ds.Type {
	case "", config.DatastoreLocal:
		path := ds.Path
		if path == "" {
			path = DefaultLocalPath
		}
		return local.Open(ctx, path)
	case config.DatastoreEtcd:
		return openEtcd(ctx, ds, true)
	default:
		return nil, fmt.Errorf("%w: %q", ErrUnsupported, ds.Type)
	}
}

// OpenShared opens the datastore like Open but without the node lock, for
// long-running processes (the admin CLI, the controller) that must not
// stall the node's plugin calls. For local stores it is Open.
func OpenShared(ctx context.Context, ds config.Datastore) (kv.Store, error) {
	if ds.Type == config.DatastoreEtcd {
		return openEtcd(ctx, ds, false)
	}
	return Open(ctx, ds)
}

// lockDirWhat names the lock directory in messages.
const lockDirWhat = "node lock directory (" + LockDirEnv + ", default " + DefaultLockDir + ")"

func lockDir() string {
	if dir := os.Getenv(LockDirEnv); dir != "" {
		return dir
	}
	return DefaultLockDir
}

func etcdConfig(ds config.Datastore) etcd.Config {
	return etcd.Config{
		Endpoints: ds.Endpoints, CAFile: ds.CAFile, CertFile: ds.CertFile, KeyFile: ds.KeyFile,
		Prefix: ds.Prefix, DialTimeout: ds.DialTimeout, RequestTimeout: ds.RequestTimeout,
	}
}

func openEtcd(ctx context.Context, ds config.Datastore, lock bool) (kv.Store, error) {
	cfg := etcdConfig(ds)
	var unlock func()
	if lock {
		dir := lockDir()
		wait := 3 * cfg.RequestTimeout
		if wait <= 0 {
			wait = 3 * etcd.DefaultRequestTimeout
		}
		// The directory is checked (and made) before the lock file is
		// opened, so a refusal creates nothing but a safe directory.
		if _, err := filetrust.PrepareDir(lockDirWhat, dir); err != nil {
			return nil, err
		}
		var err error
		if unlock, err = nodeLock(ctx, dir, lockName(cfg), wait); err != nil {
			return nil, err
		}
	}
	s, err := etcd.Open(ctx, cfg)
	if err != nil {
		if unlock != nil {
			unlock()
		}
		return nil, err
	}
	if unlock == nil {
		return s, nil
	}
	return &lockedStore{Store: s, unlock: unlock}, nil
}

// lockedStore releases the node lock when it is closed.
type lockedStore struct {
	*etcd.Store
	unlock func()
}

// Close closes the store and then releases the node lock.
func (l *lockedStore) Close() error {
	err := l.Store.Close()
	if l.unlock != nil {
		l.unlock()
		l.unlock = nil
	}
	return err
}
