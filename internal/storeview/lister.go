package storeview

import (
	"context"
	"fmt"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// Lister is the Source of a store that is not watched: List reads every
// pool, claim and node object through store.Store (claims first, so that
// a claim whose node writes its block between the reads is not taken for
// a claim without block), and Watch fails with ErrNoWatch. Its State has
// no revision, and a node object that cannot be decoded fails the List.
type Lister struct {
	Store store.Store
}

// List implements Source.
func (l Lister) List(ctx context.Context) (State, error) {
	var st State
	var err error
	if st.Claims, err = l.Store.ListClaims(ctx, store.ClaimSelector{}); err != nil {
		return State{}, fmt.Errorf("list claims: %w", err)
	}
	if st.Nodes, err = l.Store.ListNodes(ctx, store.NodeSelector{}); err != nil {
		return State{}, fmt.Errorf("list node objects: %w", err)
	}
	if st.Pools, err = l.Store.ListPools(ctx); err != nil {
		return State{}, fmt.Errorf("list pools: %w", err)
	}
	return st, nil
}

// Watch implements Source: it fails with ErrNoWatch.
func (Lister) Watch(context.Context, Revision, func(Batch)) error { return ErrNoWatch }
