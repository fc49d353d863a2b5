package kvbacked

import (
	"context"
	"errors"
	"fmt"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
	"github.com/ipkeeper/ipkeeper/internal/store/local"
)

// OpenLocal opens the local datastore in dir (local.Open: the file lock,
// path checks and fsync are the local package's) as a typed store.
func OpenLocal(ctx context.Context, dir string, opts ...local.Option) (*Store, error) {
	s, err := local.Open(ctx, dir, opts...)
	if err != nil {
		return nil, openErr(err)
	}
	return New(s), nil
}

// OpenEtcd opens the etcd datastore cfg names (etcd.Open) as a typed
// store.
func OpenEtcd(ctx context.Context, cfg etcd.Config) (*Store, error) {
	s, err := etcd.Open(ctx, cfg)
	if err != nil {
		return nil, openErr(err)
	}
	return New(s), nil
}

// openErr wraps store.ErrUnavailable around a backend's kv.ErrUnavailable;
// other errors (bad paths, bad configuration) pass unchanged.
func openErr(err error) error {
	if errors.Is(err, kv.ErrUnavailable) {
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return err
}
