package webui

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	// The map is served by long-running processes (ipkeeperctl ui, the
	// controller), never by the plugin: it opens every datastore type.
	_ "github.com/ipkeeper/ipkeeper/internal/datastore/kubeopen"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kube"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
	"github.com/ipkeeper/ipkeeper/internal/store/local"
	"github.com/ipkeeper/ipkeeper/internal/storeview"
)

// A feed fills the model and keeps it current until ctx ends.
type feed interface {
	run(ctx context.Context)
}

// revisioner is a store that can tell its revision cheaply (kvbacked on
// the local file or etcd): an unchanged revision means nothing changed.
type revisioner interface {
	Revision(ctx context.Context) (int64, error)
}

// follower is a store a storeview.View can follow by its watch
// (kvbacked on etcd; on the local file it reports false).
type follower interface {
	Follower() (*kvbacked.Follower, bool)
}

// watcher is a store a storeview.View follows by LIST and WATCH of its
// objects (the Kubernetes datastore).
type watcher interface {
	Watcher() *kube.Watcher
}

// pollBackoff spaces polls of a store without a revision or a watch (the
// Kubernetes API): the next poll starts at least this many times the
// last poll's duration after it ended, so a slow full read never takes
// more than a quarter of the map's time (or of the API server's for it).
const pollBackoff = 3

// openStore is Options.Open's default: the typed store as the admin CLI
// and the controller open it.
func openStore(ctx context.Context, ds config.Datastore) (store.Store, error) {
	return datastore.Open(ctx, ds, datastore.Options{})
}

// feed picks how to follow the datastore; the returned func closes what
// it opened.
func (u *UI) feed(ctx context.Context) (feed, func(), error) {
	if u.opts.View != nil {
		return &viewFeed{v: u.opts.View, m: u.m}, func() {}, nil
	}
	if u.opts.Store != nil {
		return u.feedOn(u.opts.Store), func() {}, nil
	}
	ds := u.opts.Datastore
	if ds.Type == "" || ds.Type == config.DatastoreLocal {
		dir := ds.Path
		if dir == "" {
			dir = datastore.DefaultLocalPath
		}
		open := func(ctx context.Context) (store.Store, error) { return u.opts.Open(ctx, ds) }
		return &pollFeed{open: open, file: filepath.Join(dir, local.FileName), m: u.m, every: u.opts.PollInterval}, func() {}, nil
	}
	st, err := u.opts.Open(ctx, ds)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s datastore: %w", ds.Type, err)
	}
	return u.feedOn(st), func() { _ = st.Close() }, nil
}

// feedOn follows st, which stays open: by a view kept by its watch when
// it has one (etcd, the Kubernetes API), else by polling it.
func (u *UI) feedOn(st store.Store) feed {
	if f, ok := st.(follower); ok {
		if src, ok := f.Follower(); ok {
			return &viewFeed{v: storeview.New(src, u.opts.Log), own: true, m: u.m}
		}
	}
	if w, ok := st.(watcher); ok {
		return &viewFeed{v: storeview.New(w.Watcher(), u.opts.Log), own: true, m: u.m}
	}
	return &pollFeed{open: func(context.Context) (store.Store, error) { return st, nil }, keep: true, m: u.m, every: u.opts.PollInterval}
}

// pollFeed reads the whole state when something may have changed. With
// file set (the local store) it is woken by writes to the file (inotify,
// where there is one; the store is then opened at most once per interval)
// and looks at the file every interval: only a notification or a changed
// modification time, size or inode makes it open the store, and an
// unchanged revision ends the read there. The store is opened and closed
// per read unless keep is set. Without file it reads every interval (and
// at least pollBackoff times the last read's duration after it), ending
// at the revision when the store has one; node objects at a version the
// mirror holds are not decoded again.
type pollFeed struct {
	open  func(ctx context.Context) (store.Store, error)
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
	for {
		start := time.Now()
		f.poll(ctx)
		t := time.NewTimer(max(f.every, pollBackoff*time.Since(start)))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-f.notify:
			t.Stop()
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
				f.m.replace(snapshot{})
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
	rev := int64(0)
	if r, ok := st.(revisioner); ok {
		switch rev, err = r.Revision(ctx); {
		case errors.Is(err, errors.ErrUnsupported):
			rev = 0
		case err != nil:
			return err
		case f.read && rev == f.lastRev:
			return nil
		}
	}
	s, err := readSnapshot(ctx, st, f.m.nodeVersions())
	if err != nil {
		return err
	}
	s.rev = rev
	f.m.replace(s)
	f.read, f.lastRev = true, rev
	return nil
}

// viewFeed mirrors a storeview.View (kept by the datastore's watch): at
// each change of the view the mirror takes its objects, decoding again
// only node objects at another version than it holds (model.replace). A
// view that is not synced shows its error. With own set the feed runs the
// view; otherwise someone else does (the controller, Options.View).
type viewFeed struct {
	v   *storeview.View
	own bool
	m   *model
}

func (f *viewFeed) run(ctx context.Context) {
	if f.own {
		go f.v.Run(ctx)
	}
	var shown uint64
	loaded := false
	for {
		gen, ch := f.v.Changed()
		if f.v.Lists() > 0 && (!loaded || gen != shown) {
			f.load()
			shown, loaded = gen, true
		}
		switch err := f.v.Err(); {
		case f.v.Synced():
			f.m.setStatus(nil)
		case err != nil:
			f.m.setStatus(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
}

// load makes the mirror the view's objects.
func (f *viewFeed) load() {
	vs := f.v.Snapshot()
	have := f.m.nodeVersions()
	s := snapshot{pools: vs.Pools, claims: vs.Claims, nodes: make([]kvbacked.ScannedNode, 0, len(vs.Nodes)+len(vs.Bad))}
	s.rev, _ = kvbacked.RevisionOf(vs.Rev)
	for _, n := range vs.Nodes {
		h, ok := have[n.Name]
		s.nodes = append(s.nodes, kvbacked.ScannedNode{Name: n.Name, Version: n.Version, Node: n, Decoded: !ok || h != n.Version})
	}
	for _, e := range vs.Bad {
		switch e.Kind {
		case storeview.KindNode:
			s.nodes = append(s.nodes, kvbacked.ScannedNode{Name: e.Node.Name, Version: e.Node.Version, Err: e.Err})
		case storeview.KindPool:
			s.bad = append(s.bad, badObject{what: poolWhat(e.Pool.Spec.Name), err: e.Err})
		case storeview.KindClaim:
			s.bad = append(s.bad, badObject{what: claimWhat(e.Claim.BlockRef), err: e.Err})
		}
	}
	f.m.replace(s)
}
