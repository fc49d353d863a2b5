//go:build unix

package datastore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/filetrust"
	"github.com/ipkeeper/ipkeeper/internal/flock"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// flockWait takes an exclusive flock on dir/name, waiting at most wait
// (and while ctx lasts); the returned func releases it. dir must have
// passed filetrust.PrepareDir; the lock file must be a regular file that
// only root or the caller may change (filetrust.OpenPrivateFile), else the
// error wraps ErrBadPath.
func flockWait(ctx context.Context, dir, name string, wait time.Duration) (func(), error) {
	path := filepath.Join(dir, name)
	f, err := filetrust.OpenPrivateFile("node lock file", path, os.O_RDWR|os.O_CREATE)
	if err != nil {
		return nil, fmt.Errorf("node lock: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := flock.Lock(ctx, f); err != nil {
		if pe := (*os.PathError)(nil); errors.As(err, &pe) {
			return nil, fmt.Errorf("node lock %s: %w", path, pe.Err)
		}
		return nil, fmt.Errorf("%w: another ipkeeper process on this node held %s for %v: %w", store.ErrUnavailable, path, wait, ctx.Err())
	}
	return func() { _ = f.Close() }, nil
}
