package local

import (
	"context"

	"go.etcd.io/bbolt"
)

// Revision returns the store's revision: the version the last committed
// write gave the keys it wrote, 0 for a store never written. Every write
// changes it, so a reader that remembers it can tell whether anything
// changed since it last read (the address map polls it).
func (s *Store) Revision(ctx context.Context) (int64, error) {
	if err := s.ctxErr(ctx, "revision"); err != nil {
		return 0, err
	}
	var rev int64
	err := s.db.View(func(tx *bbolt.Tx) error {
		var err error
		rev, err = revision(tx.Bucket(bucketMeta))
		return err
	})
	if err != nil {
		return 0, s.wrap("revision", err)
	}
	return rev, nil
}
