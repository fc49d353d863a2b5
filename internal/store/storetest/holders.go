package storetest

import (
	"net/netip"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// Holders returns every address held in s's node objects with the handle
// holding it, and fails the test when an address is held twice: the
// check every test of allocations on a store ends with.
func Holders(t testing.TB, s store.Store) map[netip.Addr]string {
	t.Helper()
	nodes, err := s.ListNodes(t.Context(), store.NodeSelector{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[netip.Addr]string{}
	for _, n := range nodes {
		for _, h := range n.Handles {
			for _, ip := range h.IPs {
				if other, dup := out[ip.Addr]; dup {
					t.Fatalf("%s held by %s and %s", ip.Addr, other, h.ID)
				}
				out[ip.Addr] = h.ID
			}
		}
	}
	return out
}
