package kube

import (
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/storetest"
)

// TestConformance runs the contract's suite on the real API server with
// the datastore's RBAC (openStore), each open in a fresh partition.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openStore(t) })
}
