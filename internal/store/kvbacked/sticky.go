package kvbacked

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// listSticky returns the node objects holding a record of sticky
// identity id: the nodes its index entries name, each read and kept when
// a record has the identity. An entry whose node object has no such
// record (released, moved, deleted) is deleted on condition that the
// object is still as read: a write since may hold the identity again,
// and put the entry back in its transaction.
func (s *Store) listSticky(ctx context.Context, id string) ([]store.Node, error) {
	if _, err := ipam.ParseStickyID(id); err != nil {
		return nil, fmt.Errorf("%w: %w", store.ErrInvalid, err)
	}
	prefix := stickyPrefix + id + "/"
	idx, err := s.list(ctx, "list the node objects of sticky identity "+id, prefix)
	if err != nil || len(idx) == 0 {
		return nil, err
	}
	var out []store.Node
	for _, e := range idx {
		name := strings.TrimPrefix(e.Key, prefix)
		n, err := s.GetNode(ctx, name)
		switch {
		case err == nil && slices.Contains(n.StickyIDs(), id):
			out = append(out, n)
			continue
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return nil, err
		}
		v, _ := parseVersion(n.Version)
		if err := s.dropLends(ctx, e, kv.KeyValue{Key: headKey(name), Version: v}); err != nil {
			return nil, err
		}
	}
	return out, nil
}
