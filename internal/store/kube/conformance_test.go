package kube

import (
	"strconv"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/storetest"
)

// TestConformance runs the contract's suite on the real API server with
// the datastore's RBAC (openStore), each open in a fresh partition; what
// writes reservations, which that RBAC does not allow, runs as the
// cluster admin.
func TestConformance(t *testing.T) {
	storetest.RunWithAdmin(t, func(t *testing.T) store.Store { return openStore(t) },
		func(t *testing.T) store.Store { return openAdmin(t, "t"+strconv.FormatInt(partitions.Add(1), 10)) })
}
