// Package storetest is the one conformance suite every store.Store backend
// runs from its own tests — the local file, etcd and the Kubernetes API:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store { return openFresh(t) })
//	}
//
// It uses only the store.Store interface, so what it checks holds for any
// backend: compare-and-swap on stale versions, create races with one
// winner, delete preconditions, lists that are exact (a backend indexing
// by hashed labels filters by content), objects that round-trip exactly,
// thousands of addresses on one node, the size limits the backend
// reports (of an object, or of one write of a node object) and invalid
// objects refused before anything is written. The suite claims every
// block a node object holds for its node before it writes the object.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// Run runs the whole suite as subtests of t. open must return a fresh,
// empty store each time it is called; Run closes every store it opens.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"PoolLifecycle", testPoolLifecycle},
		{"PoolNames", testPoolNames},
		{"PoolInvalid", testPoolInvalid},
		{"ListPools", testListPools},
		{"ClaimLifecycle", testClaimLifecycle},
		{"ClaimCreateRace", testClaimCreateRace},
		{"ListClaimsExact", testListClaimsExact},
		{"ListClaimsCached", testListClaimsCached},
		{"ClaimSameCIDRTwoPools", testClaimSameCIDRTwoPools},
		{"ClaimInvalid", testClaimInvalid},
		{"NodeRoundTrip", testNodeRoundTrip},
		{"NodeLifecycle", testNodeLifecycle},
		{"NodeVersionAfterRecreate", testNodeVersionAfterRecreate},
		{"NodeUnchangedUpdate", testNodeUnchangedUpdate},
		{"NodeUpdateWhole", testNodeUpdateWhole},
		{"NodeNames", testNodeNames},
		{"NodeInvalid", testNodeInvalid},
		{"NodeManyAddresses", testNodeManyAddresses},
		{"NodeTooLarge", testNodeTooLarge},
		{"NodeWriteTooLarge", testNodeWriteTooLarge},
		{"NodeConcurrentAllocations", testNodeConcurrentAllocations},
		{"ListNodesLendsTo", testListNodesLendsTo},
		{"ListNodesAll", testListNodesAll},
		{"CancelledContext", testCancelledContext},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			tc.fn(t, claiming{s})
		})
	}
}

// claiming is the store under test, whose node objects' blocks are
// claimed by their nodes before the objects are written, as the allocator
// does: a node object holds only blocks its node claims, and a backend
// keeping a block's state with its claim (Kubernetes) refuses the others.
type claiming struct{ store.Store }

func (c claiming) claim(ctx context.Context, n store.Node) error {
	for _, b := range n.Blocks {
		ref := store.BlockRef{Pool: b.Pool, CIDR: b.CIDR}
		_, err := c.GetClaim(ctx, ref)
		if errors.Is(err, store.ErrNotFound) && store.ValidName("node", n.Name) == nil {
			_, err = c.CreateClaim(ctx, store.Claim{BlockRef: ref, Node: n.Name})
		}
		if err != nil && !errors.Is(err, store.ErrExists) && !errors.Is(err, store.ErrInvalid) {
			return fmt.Errorf("claiming %s for node object %q: %w", ref, n.Name, err)
		}
	}
	return nil
}

func (c claiming) CreateNode(ctx context.Context, n store.Node) (store.Node, error) {
	if err := c.claim(ctx, n); err != nil {
		return store.Node{}, err
	}
	return c.Store.CreateNode(ctx, n)
}

func (c claiming) UpdateNode(ctx context.Context, n store.Node) (store.Node, error) {
	if err := c.claim(ctx, n); err != nil {
		return store.Node{}, err
	}
	return c.Store.UpdateNode(ctx, n)
}
