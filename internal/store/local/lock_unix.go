//go:build unix

package local

import (
	"context"
	"os"

	"github.com/ipkeeper/ipkeeper/internal/flock"
)

// waitLock takes an exclusive flock on f, blocking until the holder
// releases it or ctx ends, so waiting processes take turns without bbolt's
// 50 ms polling gaps. On error f is closed (see flock.Lock).
func waitLock(ctx context.Context, f *os.File) error { return flock.Lock(ctx, f) }
