//go:build !unix

package local

import (
	"context"
	"os"
)

// waitLock leaves locking to bbolt's own polling flock (bounded by its
// Timeout option) where there is no blocking flock.
func waitLock(ctx context.Context, f *os.File) error {
	if err := ctx.Err(); err != nil {
		_ = f.Close()
		return context.Cause(ctx)
	}
	return nil
}
