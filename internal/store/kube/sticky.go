package kube

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// listSticky returns the node objects holding a record of sticky
// identity id: the nodes of the IPAMBlocks labelled with it (the label
// is written in the PUT of the block's records, so it never misses one),
// each read and kept when a record has the identity. Node objects still
// in the v1alpha1 form carry no such label: a caller that finds nothing
// looks through every node object.
func (s *Store) listSticky(ctx context.Context, id string) ([]store.Node, error) {
	if _, err := ipam.ParseStickyID(id); err != nil {
		return nil, fmt.Errorf("%w: %w", store.ErrInvalid, err)
	}
	objs, err := s.list(ctx, kindBlock, s.selector(StickyPrefix+labelValue(id)))
	if err != nil {
		return nil, err
	}
	blocks, err := s.nodeBlocks(objs, "")
	if err != nil {
		return nil, err
	}
	names := slices.Sorted(maps.Keys(blocks))
	var out []store.Node
	for _, name := range names {
		n, err := s.GetNode(ctx, name)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if slices.Contains(n.StickyIDs(), id) {
			out = append(out, n)
		}
	}
	return out, nil
}
