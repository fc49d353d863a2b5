package firstlayout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// Allocator allocates and releases addresses in a datastore.
type Allocator struct {
	store kv.Store
	log   *slog.Logger
	hints HintCache
	// nodeLocks serializes this process's allocations per node, as the
	// node lock does across plugin processes, so that they build on each
	// other's hints instead of conflicting.
	nodeLocks sync.Map // node -> *sync.Mutex
	// decoded caches blocks by version so they are decoded once.
	decoded blockCache
	// MaxAttempts bounds the transaction attempts of one operation.
	MaxAttempts int
	// BaseBackoff and MaxBackoff bound the jittered wait between attempts.
	BaseBackoff, MaxBackoff time.Duration
	// Now is the clock used for handle timestamps.
	Now func() time.Time
}

// New returns an allocator over store. A nil logger discards logs.
func New(store kv.Store, log *slog.Logger) *Allocator {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Allocator{
		store:       store,
		log:         log,
		hints:       &MemoryHints{},
		MaxAttempts: 100,
		BaseBackoff: time.Millisecond,
		MaxBackoff:  50 * time.Millisecond,
		Now:         time.Now,
	}
}

// SetHints replaces the in-memory hints, e.g. with FileHints for
// short-lived plugin processes.
func (a *Allocator) SetHints(c HintCache) { a.hints = c }

// lockNode serializes allocations of one node within this process.
func (a *Allocator) lockNode(node string) func() {
	m, _ := a.nodeLocks.LoadOrStore(node, &sync.Mutex{})
	mu := m.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// retry runs attempt until it returns something other than a conflict,
// waiting a jittered, growing backoff between attempts.
func (a *Allocator) retry(ctx context.Context, op string, attempt func() error) error {
	return retryConflicts(ctx, a.log, retryPolicy{a.MaxAttempts, a.BaseBackoff, a.MaxBackoff}, op, attempt)
}

// retryPolicy bounds the attempts of one operation and the jittered wait
// between them.
type retryPolicy struct {
	attempts         int
	base, maxBackoff time.Duration
}

// retryConflicts runs attempt until it returns something other than a
// conflict of either storage contract (kv or store), waiting a jittered,
// growing backoff between attempts.
func retryConflicts(ctx context.Context, log *slog.Logger, pol retryPolicy, op string, attempt func() error) error {
	wait := pol.base
	for i := 1; ; i++ {
		err := attempt()
		if !errors.Is(err, kv.ErrConflict) && !errors.Is(err, store.ErrConflict) {
			return err
		}
		if i >= pol.attempts {
			return fmt.Errorf("%s: %w after %d attempts", op, allocator.ErrContended, i)
		}
		log.Debug("conflict, retrying", "op", op, "attempt", i)
		d := wait/2 + rand.N(wait/2+1)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w: %w", op, allocator.ErrContended, ctx.Err())
		case <-time.After(d):
		}
		wait = min(wait*2, pol.maxBackoff)
	}
}
