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
// objects refused before anything is written.
package storetest

import (
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
			tc.fn(t, s)
		})
	}
}
