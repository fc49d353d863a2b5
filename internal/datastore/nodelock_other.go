//go:build !unix

package datastore

import (
	"context"
	"time"
)

// flockWait does nothing where there is no flock: conflicts between local
// processes are still safe, only slower.
func flockWait(ctx context.Context, _, _ string, _ time.Duration) (func(), error) {
	return func() {}, ctx.Err()
}
