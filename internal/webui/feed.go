package webui

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
	"github.com/ipkeeper/ipkeeper/internal/store/local"
)

// A feed fills the model and keeps it current until ctx ends.
type feed interface {
	run(ctx context.Context)
}

// revisioner is a store that can tell its revision cheaply (local, etcd).
type revisioner interface {
	Revision(ctx context.Context) (int64, error)
}

// watcher is a store that streams its changes (etcd).
type watcher interface {
	revisioner
	Watch(ctx context.Context, prefix string, after int64, fn func(rev int64, evs []etcd.Event)) error
}

// retryWait is the pause after a failed read or a broken watch.
const retryWait = time.Second

// feed picks how to follow the datastore; the returned func closes what
// it opened.
func (u *UI) feed(ctx context.Context) (feed, func(), error) {
	if u.opts.Store != nil {
		if w, ok := u.opts.Store.(watcher); ok {
			return &watchFeed{st: u.opts.Store, w: w, m: u.m}, func() {}, nil
		}
		open := func(context.Context) (kv.Store, error) { return u.opts.Store, nil }
		return &pollFeed{open: open, keep: true, m: u.m, every: u.opts.PollInterval}, func() {}, nil
	}
	ds := u.opts.Datastore
	if ds.Type == "" || ds.Type == config.DatastoreLocal {
		dir := ds.Path
		if dir == "" {
			dir = datastore.DefaultLocalPath
		}
		open := func(ctx context.Context) (kv.Store, error) { return u.opts.Open(ctx, ds) }
		return &pollFeed{open: open, file: filepath.Join(dir, local.FileName), m: u.m, every: u.opts.PollInterval}, func() {}, nil
	}
	st, err := u.opts.Open(ctx, ds)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s datastore: %w", ds.Type, err)
	}
	closeSt := func() { _ = st.Close() }
	if w, ok := st.(watcher); ok {
		return &watchFeed{st: st, w: w, m: u.m}, closeSt, nil
	}
	return &pollFeed{open: func(context.Context) (kv.Store, error) { return st, nil }, keep: true, m: u.m, every: u.opts.PollInterval}, closeSt, nil
}

// readAll lists every pool, block and handle.
func readAll(ctx context.Context, st kv.Store) ([]kv.KeyValue, error) {
	var out []kv.KeyValue
	for _, p := range []string{allocator.PoolPrefix, allocator.BlockPrefix, allocator.HandlePrefix} {
		es, err := st.List(ctx, p)
		if err != nil {
			return nil, err
		}
		out = append(out, es...)
	}
	return out, nil
}

// maxVersion is the revision a store without one is shown at.
func maxVersion(es []kv.KeyValue) int64 {
	var v int64
	for _, e := range es {
		v = max(v, e.Version)
	}
	return v
}

// pollFeed reads the whole state when something may have changed. With
// file set (the local store) it is woken by writes to the file (inotify,
// where there is one; the store is then opened at most once per interval)
// and looks at the file every interval: only a notification or a changed
// modification time, size or inode makes it open the store, and an
// unchanged revision ends the read there. The store is opened and closed
// per read unless keep is set. Without file it reads every interval.
type pollFeed struct {
	open  func(ctx context.Context) (kv.Store, error)
	keep  bool
	file  string
	m     *model
	every time.Duration

	stamp   fileStamp
	lastRev int64
	read    bool
	// notify reports writes to file (inotify), when available.
	notify <-chan struct{}
	// force makes the next poll read whatever the file's stamp says.
	force bool
	// opened is when the store was last opened.
	opened time.Time
}

type fileStamp struct {
	mod  time.Time
	size int64
	ino  uint64
}

func (f *pollFeed) run(ctx context.Context) {
	if f.file != "" {
		f.notify = watchFile(ctx, f.file)
	}
	t := time.NewTicker(f.every)
	defer t.Stop()
	for {
		f.poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-f.notify:
			// The file was written: read now, but open the store at most
			// once per interval.
			if wait := f.every - time.Since(f.opened); wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
			f.force = true
		}
	}
}

func (f *pollFeed) poll(ctx context.Context) {
	if f.file != "" {
		fi, err := os.Stat(f.file)
		if errors.Is(err, os.ErrNotExist) {
			// Nothing was ever allocated here; opening would create it.
			if !f.read || f.lastRev != 0 {
				f.m.replace(0, nil)
			}
			f.read, f.lastRev, f.stamp = true, 0, fileStamp{}
			f.m.setStatus(nil)
			return
		}
		if err != nil {
			f.m.setStatus(err)
			return
		}
		st := fileStamp{mod: fi.ModTime(), size: fi.Size(), ino: inode(fi)}
		// Without notifications, a change less than two intervals old
		// is read again: a second write within the file system's
		// timestamp granularity would leave the stamp as it was.
		recent := f.notify == nil && time.Since(st.mod) < 2*f.every
		if f.read && st == f.stamp && !recent && !f.force {
			return
		}
		f.force = false
		if err := f.load(ctx); err != nil {
			f.m.setStatus(err)
			return
		}
		f.stamp = st
		f.m.setStatus(nil)
		return
	}
	if err := f.load(ctx); err != nil {
		f.m.setStatus(err)
		return
	}
	f.m.setStatus(nil)
}

func (f *pollFeed) load(ctx context.Context) error {
	f.opened = time.Now()
	st, err := f.open(ctx)
	if err != nil {
		return err
	}
	if !f.keep {
		defer st.Close()
	}
	rev := int64(-1)
	if r, ok := st.(revisioner); ok {
		if rev, err = r.Revision(ctx); err != nil {
			return err
		}
		if f.read && rev == f.lastRev {
			return nil
		}
	}
	es, err := readAll(ctx, st)
	if err != nil {
		return err
	}
	if rev < 0 {
		rev = maxVersion(es)
	}
	f.m.replace(rev, es)
	f.read, f.lastRev = true, rev
	return nil
}

// watchFeed reads the whole state once, at a revision taken before the
// reads, then applies the etcd watch from that revision (events the reads
// already saw are ignored by version). A broken watch is followed by a
// fresh full read, which the mirror diffs, so nothing is missed.
type watchFeed struct {
	st kv.Store
	w  watcher
	m  *model
}

func (f *watchFeed) run(ctx context.Context) {
	for ctx.Err() == nil {
		err := f.once(ctx)
		if ctx.Err() != nil {
			return
		}
		f.m.setStatus(err)
		select {
		case <-ctx.Done():
		case <-time.After(retryWait):
		}
	}
}

func (f *watchFeed) once(ctx context.Context) error {
	rev, err := f.w.Revision(ctx)
	if err != nil {
		return err
	}
	es, err := readAll(ctx, f.st)
	if err != nil {
		return err
	}
	f.m.replace(rev, es)
	f.m.setStatus(nil)
	return f.w.Watch(ctx, "", rev, func(rev int64, evs []etcd.Event) {
		chs := make([]change, 0, len(evs))
		for _, e := range evs {
			chs = append(chs, change{key: e.Key, value: e.Value, version: e.Version, del: e.Delete})
		}
		f.m.apply(rev, chs)
	})
}
