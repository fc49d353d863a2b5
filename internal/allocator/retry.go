package allocator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// retryPolicy bounds the attempts of one operation and the jittered wait
// between them.
type retryPolicy struct {
	attempts         int
	base, maxBackoff time.Duration
}

// retryConflicts runs attempt until it returns something other than a
// conflict (store.ErrConflict), waiting a jittered,
// growing backoff between attempts.
func retryConflicts(ctx context.Context, log *slog.Logger, pol retryPolicy, op string, attempt func() error) error {
	wait := pol.base
	for i := 1; ; i++ {
		err := attempt()
		if !errors.Is(err, store.ErrConflict) {
			return err
		}
		if i >= pol.attempts {
			return fmt.Errorf("%s: %w after %d attempts", op, ErrContended, i)
		}
		log.Debug("conflict, retrying", "op", op, "attempt", i)
		d := wait/2 + rand.N(wait/2+1)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w: %w", op, ErrContended, ctx.Err())
		case <-time.After(d):
		}
		wait = min(wait*2, pol.maxBackoff)
	}
}
