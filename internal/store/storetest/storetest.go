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
	RunWithAdmin(t, open, open)
}

// RunWithAdmin is Run for a backend whose stores open lacks the rights
// an admin has (the Kubernetes datastore's ServiceAccounts only read
// reservations): the tests writing reservations use stores admin opens.
func RunWithAdmin(t *testing.T, open, admin func(t *testing.T) store.Store) {
	t.Helper()
	tests := []struct {
		name  string
		fn    func(t *testing.T, s store.Store)
		admin bool
	}{
		{name: "PoolLifecycle", fn: testPoolLifecycle},
		{name: "PoolNames", fn: testPoolNames},
		{name: "PoolInvalid", fn: testPoolInvalid},
		{name: "ListPools", fn: testListPools},
		{name: "ClaimLifecycle", fn: testClaimLifecycle},
		{name: "ClaimCreateRace", fn: testClaimCreateRace},
		{name: "ListClaimsExact", fn: testListClaimsExact},
		{name: "ListClaimsCached", fn: testListClaimsCached},
		{name: "ClaimSameCIDRTwoPools", fn: testClaimSameCIDRTwoPools},
		{name: "ClaimInvalid", fn: testClaimInvalid},
		{name: "NodeRoundTrip", fn: testNodeRoundTrip},
		{name: "NodeLifecycle", fn: testNodeLifecycle},
		{name: "NodeVersionAfterRecreate", fn: testNodeVersionAfterRecreate},
		{name: "NodeUnchangedUpdate", fn: testNodeUnchangedUpdate},
		{name: "NodeUpdateWhole", fn: testNodeUpdateWhole},
		{name: "NodeNames", fn: testNodeNames},
		{name: "NodeInvalid", fn: testNodeInvalid},
		{name: "NodeManyAddresses", fn: testNodeManyAddresses},
		{name: "NodeTooLarge", fn: testNodeTooLarge},
		{name: "NodeWriteTooLarge", fn: testNodeWriteTooLarge},
		{name: "NodeConcurrentAllocations", fn: testNodeConcurrentAllocations},
		{name: "ListNodesLendsTo", fn: testListNodesLendsTo},
		{name: "ListNodesSticky", fn: testListNodesSticky},
		{name: "ListNodesAll", fn: testListNodesAll},
		{name: "Reservations", fn: testReservations, admin: true},
		{name: "CancelledContext", fn: testCancelledContext},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opener := open
			if tc.admin {
				opener = admin
			}
			s := opener(t)
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
