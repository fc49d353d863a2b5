// Package datastore opens the kv.Store a config's `datastore` object names.
package datastore

import (
	"context"
	"errors"
	"fmt"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store/local"
)

// DefaultLocalPath is where the local store lives when no path is given.
const DefaultLocalPath = "/var/lib/cni/ipkeeper"

// ErrUnsupported means the datastore type is not known.
var ErrUnsupported = errors.New("unsupported datastore type")

// Open opens the datastore ds describes.
func Open(ctx context.Context, ds config.Datastore) (kv.Store, error) {
	switch ds.Type {
	case "", "local":
		path := ds.Path
		if path == "" {
			path = DefaultLocalPath
		}
		return local.Open(ctx, path)
	default:
		return nil, fmt.Errorf("%w: %q", ErrUnsupported, ds.Type)
	}
}
