// Package local is the "local" datastore: a kv.Store in one bbolt file on
// this machine, for single-node use without any setup.
//
// The file is dir/ipkeeper.db (mode 0600, directory 0700); Open refuses a
// directory or file another user could change (filetrust.PrepareDir). Only one process
// holds it open at a time: Open takes an exclusive flock on the file and
// waits for it (up to the lock timeout, or until ctx ends), so CNI plugin
// invocations that run at the same time are serialized by the kernel. Each
// Txn is one bbolt read-write transaction, fsynced before it returns.
//
// Every value is stored behind an 8-byte big-endian version header. The
// version is a store-wide revision counter, kept in a meta bucket and
// incremented by every committed Txn that writes, like etcd's
// mod_revision: it is positive, only grows, and is never reused.
package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/ipkeeper/ipkeeper/internal/filetrust"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// FileName is the name of the database file inside the directory given to
// Open.
const FileName = "ipkeeper.db"

// DefaultLockTimeout is how long Open waits for another process to release
// the file unless WithLockTimeout says otherwise.
const DefaultLockTimeout = 10 * time.Second

// ErrInvalidKey is returned for keys the kv contract does not allow: empty,
// containing a NUL byte, or longer than bbolt's key limit.
var ErrInvalidKey = errors.New("local: invalid key")

// ErrBadPath is returned when the datastore directory or file cannot be
// used safely: the path is empty, contains NUL, is or lies under something
// that is not a directory, is a symbolic link or special file where a file
// belongs, or is owned or writable by another user. Its messages name the
// path and the fix. Nothing is created or changed when it is returned.
// It is filetrust.ErrUnsafe, which every path check of ipkeeper wraps.
var ErrBadPath = filetrust.ErrUnsafe

// ErrCorrupt is returned when the file holds data this package did not
// write (a value without a version header, an unknown format).
var ErrCorrupt = errors.New("local: corrupt datastore")

const formatVersion = "1"

var (
	bucketKV   = []byte("kv")
	bucketMeta = []byte("meta")
	keyRev     = []byte("revision")
	keyFormat  = []byte("format")
)

// Option configures Open.
type Option func(*options)

type options struct {
	lockTimeout time.Duration
}

// WithLockTimeout sets how long Open waits for the file lock held by
// another process before it fails with an error wrapping
// store.ErrUnavailable. Values <= 0 mean DefaultLockTimeout.
func WithLockTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.lockTimeout = d
		}
	}
}

// Store is the bbolt-backed kv.Store. It is safe for concurrent use by
// multiple goroutines; bbolt runs one writer at a time.
type Store struct {
	db        *bbolt.DB
	path      string
	closeOnce sync.Once
	closeErr  error
}

var _ kv.Store = (*Store)(nil)

// Open opens (creating if needed) the datastore in dir.
//
// The directory and every directory above it must be owned by root or the
// caller and not writable by other users (filetrust.PrepareDir); what is missing is
// created with mode 0700. The file is opened without following a symbolic
// link and must be a regular file owned by root or the caller
// (filetrust.OpenPrivateFile); it is created with mode 0600, and an existing file
// open to other users is made 0600. A path that fails these checks fails
// with an error wrapping ErrBadPath that names the path and the fix,
// before anything is created.
//
// Open blocks while another process holds the file, until the lock
// timeout passes or ctx ends; both fail with an error that wraps
// store.ErrUnavailable and names the file.
func Open(ctx context.Context, dir string, opts ...Option) (*Store, error) {
	o := options{lockTimeout: DefaultLockTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("local: open %s: %w: %w", dir, store.ErrUnavailable, err)
	}
	if _, err := filetrust.PrepareDir("datastore directory", dir); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, FileName)

	lockCtx, cancel := context.WithTimeoutCause(ctx, o.lockTimeout, errLockTimeout)
	defer cancel()
	boltTimeout := o.lockTimeout
	if dl, ok := ctx.Deadline(); ok {
		boltTimeout = max(min(boltTimeout, time.Until(dl)), time.Millisecond)
	}
	locked := false
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{
		// bbolt's own flock polls every 50 ms; on unix waitLock below has
		// already taken the lock (blocking, woken as soon as it is free), so
		// bbolt's non-blocking attempt on the same descriptor succeeds at
		// once. Timeout is the backstop for other systems.
		Timeout: boltTimeout,
		OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
			if locked {
				return os.OpenFile(name, flag, perm)
			}
			f, err := filetrust.OpenPrivateFile("datastore file", name, flag)
			if err != nil {
				return nil, err
			}
			// Only the first call opens the database file itself.
			locked = true
			if err := waitLock(lockCtx, f); err != nil {
				return nil, err
			}
			return f, nil
		},
	})
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return nil, fmt.Errorf("local: waiting for the lock on %s: %w: %w", path, store.ErrUnavailable, ctx.Err())
		case errors.Is(err, ErrBadPath):
			return nil, err
		case errors.Is(err, errLockTimeout) || errors.Is(err, bolterrors.ErrTimeout):
			return nil, fmt.Errorf("local: %s is locked by another process, gave up after %s: %w",
				path, o.lockTimeout, store.ErrUnavailable)
		default:
			return nil, fmt.Errorf("local: open %s: %w", path, err)
		}
	}
	s := &Store{db: db, path: path}
	if err := s.init(); err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

var errLockTimeout = errors.New("lock timeout")

// init creates the buckets of a new file and checks the format of an
// existing one. It only writes (and fsyncs) when something is missing.
func (s *Store) init() error {
	ready := false
	err := s.db.View(func(tx *bbolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil || tx.Bucket(bucketKV) == nil {
			return nil
		}
		if f := meta.Get(keyFormat); string(f) != formatVersion {
			return fmt.Errorf("%w: %s has format %q, want %q", ErrCorrupt, s.path, f, formatVersion)
		}
		ready = true
		return nil
	})
	if err != nil || ready {
		return err
	}
	err = s.db.Update(func(tx *bbolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(bucketKV); err != nil {
			return err
		}
		if f := meta.Get(keyFormat); f != nil && string(f) != formatVersion {
			return fmt.Errorf("%w: %s has format %q, want %q", ErrCorrupt, s.path, f, formatVersion)
		}
		return meta.Put(keyFormat, []byte(formatVersion))
	})
	if err != nil {
		return fmt.Errorf("local: initialize %s: %w", s.path, err)
	}
	return nil
}

var _ kv.Limiter = (*Store)(nil)

// Limits implements kv.Limiter: bbolt bounds keys and values but neither
// the number of operations nor the size of a transaction.
func (s *Store) Limits() kv.Limits {
	return kv.Limits{MaxKeyBytes: bbolt.MaxKeySize, MaxValueBytes: bbolt.MaxValueSize - headerLen}
}

// Path returns the database file's path.
func (s *Store) Path() string { return s.path }

// Close releases the file and its lock. Calling it again returns the first
// result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if err := s.db.Close(); err != nil {
			s.closeErr = fmt.Errorf("local: close %s: %w", s.path, err)
		}
	})
	return s.closeErr
}

// Check runs bbolt's consistency check over the whole file and returns
// every problem it finds, joined. It writes nothing.
func (s *Store) Check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("local: check %s: %w: %w", s.path, store.ErrUnavailable, err)
	}
	// A read-write transaction that is rolled back: Check is only safe
	// against concurrent writers from inside one.
	tx, err := s.db.Begin(true)
	if err != nil {
		return fmt.Errorf("local: check %s: %w: %w", s.path, store.ErrUnavailable, err)
	}
	defer func() { _ = tx.Rollback() }()
	var errs []error
	for err := range tx.Check() {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s: %w", ErrCorrupt, s.path, errors.Join(errs...))
	}
	return nil
}
