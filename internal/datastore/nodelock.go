package datastore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/filetrust"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
)

// A plugin call on etcd or the Kubernetes API opens its datastore under
// this node's exclusive lock for that datastore: a flock on a file under
// $IPKEEPER_LOCK_DIR (default DefaultLockDir), held until Close. Plugin
// processes on one node then take turns instead of fighting over the
// node's own blocks, so transaction conflicts come only from other nodes.
// A process that dies releases its lock with its file descriptor. The lock
// directory and the lock file must be safe for root to use (owned by root
// or the caller, not writable by others, no symbolic link or special file
// as the lock file): anything else fails with ErrBadPath naming the path
// and the fix. Waiting for the lock is bounded by three request timeouts
// and by ctx; running out wraps store.ErrUnavailable. The local file needs
// no node lock: the local package locks the file itself.

// DefaultLockDir holds the node-local lock files of shared datastores;
// $IPKEEPER_LOCK_DIR overrides it.
const DefaultLockDir = "/run/ipkeeper"

// LockDirEnv names the environment variable that overrides DefaultLockDir.
const LockDirEnv = "IPKEEPER_LOCK_DIR"

// lockDirWhat names the lock directory in messages.
const lockDirWhat = "node lock directory (" + LockDirEnv + ", default " + DefaultLockDir + ")"

func lockDir() string {
	if dir := os.Getenv(LockDirEnv); dir != "" {
		return dir
	}
	return DefaultLockDir
}

// nodeLock takes the node lock file name in the lock directory, waiting
// at most three request timeouts (default config.DefaultRequestTimeout);
// the returned func releases it. The directory is checked (and made)
// before the lock file is opened, so a refusal creates nothing but a safe
// directory.
func nodeLock(ctx context.Context, name string, requestTimeout time.Duration) (func(), error) {
	dir := lockDir()
	if _, err := filetrust.PrepareDir(lockDirWhat, dir); err != nil {
		return nil, err
	}
	if requestTimeout <= 0 {
		requestTimeout = config.DefaultRequestTimeout
	}
	return flockWait(ctx, dir, name, 3*requestTimeout)
}

// release runs unlock, if any.
func release(unlock func()) {
	if unlock != nil {
		unlock()
	}
}

// lockName names the node lock of one etcd datastore: the same cluster and
// prefix always map to the same file, other datastores to other files.
func lockName(cfg etcd.Config) string {
	eps := slices.Clone(cfg.Endpoints)
	slices.Sort(eps)
	prefix := cfg.Prefix
	if prefix == "" {
		prefix = etcd.DefaultPrefix
	}
	sum := sha256.Sum256([]byte(strings.TrimRight(prefix, "/") + "\x00" + strings.Join(eps, "\x00")))
	return "etcd-" + hex.EncodeToString(sum[:8]) + ".lock"
}

// locked is a plugin's store under the node lock: Close leaves the node's
// hint file (etcd, when the open named a node), releases the lock and then
// closes the store.
type locked struct {
	store.Store
	unlock func()
	hint   *hintFile
}

// Close writes or removes the hint file, releases the node lock, then
// closes the store. The store's last request has returned by then and
// closing it only drops its connections, so the next process of the node
// need not wait for that.
func (l *locked) Close() error {
	if l.hint != nil {
		l.hint.save()
		l.hint = nil
	}
	release(l.unlock)
	l.unlock = nil
	return l.Store.Close()
}
