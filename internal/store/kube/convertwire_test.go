package kube

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipam"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// wholeWire is an IPAMNode's spec as v1alpha1 code wrote it: the whole
// node object, records as strings.
type wholeWire struct {
	Node    string             `json:"node"`
	Blocks  []store.BlockSpec  `json:"blocks"`
	Records []string           `json:"records"`
	Handles []store.HandleSpec `json:"handles,omitempty"`
	Loans   []store.LoanSpec   `json:"loans,omitempty"`
}

// wholeOf returns node name's spec in the v1alpha1 form.
func wholeOf(name string, spec store.NodeSpec) wholeWire {
	w := wholeWire{Node: name, Blocks: spec.Blocks, Records: make([]string, len(spec.Handles)), Loans: spec.Loans}
	for i := range spec.Handles {
		w.Records[i] = store.FormatRecord(&spec.Handles[i])
	}
	return w
}

// claimed claims n's blocks for n's node (as the allocator does before
// a node object takes a block on) and returns n.
func claimed(t testing.TB, st *Store, n store.Node) store.Node {
	t.Helper()
	claimBlocks(t, context.Background(), st, n)
	return n
}

func claimBlocks(t testing.TB, ctx context.Context, st *Store, n store.Node) {
	t.Helper()
	for _, b := range n.Blocks {
		_, err := st.CreateClaim(ctx, store.Claim{BlockRef: store.BlockRef{Pool: b.Pool, CIDR: b.CIDR}, Node: n.Name})
		if err != nil && !errors.Is(err, store.ErrExists) {
			t.Fatal(err)
		}
	}
}

func mustAddr(t testing.TB, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func ipamIP(a netip.Addr, pool string, block netip.Prefix) ipam.HandleIP {
	return ipam.HandleIP{Addr: a, Pool: pool, Block: block}
}
