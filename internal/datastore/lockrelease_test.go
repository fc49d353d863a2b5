package datastore

import (
	"errors"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// closeBlocked is a store whose Close waits until release is closed.
type closeBlocked struct {
	store.Store
	closing chan struct{}
	release chan struct{}
}

func (c *closeBlocked) Close() error {
	close(c.closing)
	<-c.release
	return nil
}

// A plugin's Close releases the node lock before it closes the store: the
// node's next plugin process takes the lock while the connections of the
// one before are still being dropped.
func TestCloseReleasesLockFirst(t *testing.T) {
	t.Setenv(LockDirEnv, t.TempDir())
	ctx := t.Context()
	unlock, err := nodeLock(ctx, "release-first.lock", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	inner := &closeBlocked{closing: make(chan struct{}), release: make(chan struct{})}
	defer close(inner.release)
	l := &locked{Store: inner, unlock: unlock}
	go l.Close()
	<-inner.closing
	// Three request timeouts of 2s: ample for a free lock, and the test
	// fails rather than hangs when the lock is still held.
	next, err := nodeLock(ctx, "release-first.lock", 2*time.Second)
	if errors.Is(err, store.ErrUnavailable) {
		t.Fatal("the node lock is still held while the store closes")
	}
	if err != nil {
		t.Fatal(err)
	}
	next()
}
