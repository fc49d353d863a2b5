package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kube"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
	"github.com/ipkeeper/ipkeeper/internal/storeview"
)

// viewSyncTimeout bounds how long a pass waits for the store view to hold
// every write made before the pass (storeview.View.Sync).
const viewSyncTimeout = 30 * time.Second

// follower is a store that a view can follow by its watch
// (kvbacked.Store; on the local file it reports false).
type follower interface {
	Follower() (*kvbacked.Follower, bool)
}

// watcher is a store on the Kubernetes API, which a view follows by its
// WATCHes (kube.Store).
type watcher interface {
	Watcher() *kube.Watcher
}

// ErrStoreNotSynced is a pass's error while its view of the datastore is
// not synced: it has not listed the datastore yet, or its watch failed and
// it has not caught up again. Nothing is released on such a view.
var ErrStoreNotSynced = errors.New("the view of the datastore is not synced")

// storeView returns the view of the datastore st a pass decides from. A
// store kept open that can be watched (etcd, the Kubernetes API) is
// followed by one view for the controller's life, started on first use:
// the pass reads nothing but what it confirms before a release. The local
// file, opened per pass, is read by a polled view that lists it again for
// each pass.
func (c *Controller) storeView(st store.Store) *storeview.View {
	if c.cfg.KeepOpen {
		if f, ok := st.(follower); ok {
			if src, ok := f.Follower(); ok {
				return c.followedView(src)
			}
		}
		if w, ok := st.(watcher); ok {
			return c.followedView(w.Watcher())
		}
	}
	return storeview.NewPolled(storeview.Lister{Store: st}, c.log)
}

// followedView returns the controller's followed view, starting it on
// src the first time: it runs until Shutdown, and each change of it asks
// for a pass (debounced as events are).
func (c *Controller) followedView(src storeview.Source) *storeview.View {
	c.viewMu.Lock()
	defer c.viewMu.Unlock()
	if c.sview != nil {
		return c.sview
	}
	v := storeview.New(src, c.log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		go v.Run(ctx)
		for {
			_, ch := v.Changed()
			select {
			case <-ctx.Done():
				return
			case <-ch:
				c.poke()
			}
		}
	}()
	c.sview, c.viewStop = v, func() { cancel(); <-done }
	return v
}

// StoreView returns the view of the datastore the controller follows by
// its watch, started by the first pass or by this call (nil when the
// datastore cannot be watched): the address map served beside the
// controller reads it too.
func (c *Controller) StoreView(ctx context.Context) (*storeview.View, error) {
	if !c.cfg.KeepOpen {
		return nil, nil
	}
	st, done, err := c.openStore(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	v := c.storeView(st)
	if v.Polled() {
		return nil, nil
	}
	return v, nil
}

// stopView stops the followed view.
func (c *Controller) stopView() {
	c.viewMu.Lock()
	stop := c.viewStop
	c.sview, c.viewStop = nil, nil
	c.viewMu.Unlock()
	if stop != nil {
		stop()
	}
}

// observe brings the view up to date (a polled view lists; a followed
// view's first list is waited for, bounded by viewSyncWait) and returns
// what the pass decides from, as allocator.Observe would have read it.
func (c *Controller) observe(ctx context.Context, st store.Store, v *storeview.View) (allocator.Snapshot, error) {
	sctx, cancel := context.WithTimeout(ctx, c.viewSyncWait)
	if !v.Polled() && v.Lists() == 0 {
		v.WaitSynced(sctx) // its first list, started by this pass
	}
	err := v.Refresh(sctx)
	cancel()
	if errors.Is(err, storeview.ErrNotSynced) {
		return allocator.Snapshot{}, fmt.Errorf("%w: %w", ErrStoreNotSynced, err)
	}
	if err != nil {
		return allocator.Snapshot{}, err
	}
	snap := v.Snapshot()
	if !snap.Synced {
		return allocator.Snapshot{}, ErrStoreNotSynced
	}
	if len(snap.Bad) > 0 {
		e := snap.Bad[0]
		return allocator.Snapshot{}, fmt.Errorf("%s cannot be read (and %d more): %w", e.What(), len(snap.Bad)-1, e.Err)
	}
	return allocator.New(viewStore{Store: st, snap: snap}, c.log).Observe(ctx)
}

// viewStore answers allocator.Observe's lists from a view's snapshot.
type viewStore struct {
	store.Store
	snap storeview.Snapshot
}

func (s viewStore) ListPools(context.Context) ([]store.Pool, error) { return s.snap.Pools, nil }

func (s viewStore) ListClaims(ctx context.Context, sel store.ClaimSelector) ([]store.Claim, error) {
	if sel != (store.ClaimSelector{}) {
		return s.Store.ListClaims(ctx, sel)
	}
	return s.snap.Claims, nil
}

func (s viewStore) ListNodes(ctx context.Context, sel store.NodeSelector) ([]store.Node, error) {
	if sel != (store.NodeSelector{}) {
		return s.Store.ListNodes(ctx, sel)
	}
	return s.snap.Nodes, nil
}
