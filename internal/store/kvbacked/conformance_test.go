package kvbacked_test

import (
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
	"github.com/ipkeeper/ipkeeper/internal/store/storetest"
)

// TestConformance runs the store contract's conformance suite on a real
// bbolt file and on the embedded etcd.
func TestConformance(t *testing.T) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) store.Store { return kvbacked.New(b.Open(t)) })
		})
	}
}
