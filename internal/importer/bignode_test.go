package importer_test

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/importer"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked/kvbackedtest"
)

const bigNode = "big-node"

// bigPlan is an import of one node holding k handles in one block of 512
// addresses, whose free queue runs from the top down (not the order a
// block starts with), so that a node object written in several writes
// must end with the imported queue.
func bigPlan(k int) *importer.Plan {
	pool := ipam.Pool{Name: "big", CIDR: netip.MustParsePrefix("10.30.0.0/22"), BlockSize: 23, Origin: importer.Origin}
	cidr := netip.MustParsePrefix("10.30.0.0/23")
	b := ipam.Block{CIDR: cidr, Pool: pool.Name, Node: bigNode, Owners: map[int]string{}}
	plan := &importer.Plan{Source: "test", Pools: []ipam.Pool{pool}}
	for ord := range k {
		id := fmt.Sprintf("net.c%03d.eth0", ord)
		b.Owners[ord] = id
		plan.Handles = append(plan.Handles, ipam.Handle{ID: id, Network: "net", ContainerID: fmt.Sprintf("c%03d", ord), IfName: "eth0", Node: bigNode,
			IPs: []ipam.HandleIP{{Addr: b.Addr(ord), Pool: pool.Name, Block: cidr}}})
	}
	for ord := b.Size() - 1; ord >= k; ord-- {
		b.Free = append(b.Free, ord)
	}
	plan.Blocks = []ipam.Block{b}
	return plan
}

// checkBig fails unless s holds plan's node whole: its block as imported
// (owners and free queue) and a record of every handle.
func checkBig(t *testing.T, s store.Store, plan *importer.Plan) {
	t.Helper()
	n, err := s.GetNode(t.Context(), bigNode)
	if err != nil {
		t.Fatal(err)
	}
	want := plan.Blocks[0]
	b, ok := n.Block(store.BlockRef{Pool: want.Pool, CIDR: want.CIDR})
	if !ok || !maps.Equal(b.Owners, want.Owners) || !slices.Equal(b.Free, want.Free) {
		t.Fatalf("block %v held %v: %d owners, free queue %v..., want %d owners, %v...", want.CIDR, ok, len(b.Owners), b.Free[:min(len(b.Free), 4)], len(want.Owners), want.Free[:4])
	}
	if len(n.Handles) != len(plan.Handles) {
		t.Fatalf("%d records, want %d", len(n.Handles), len(plan.Handles))
	}
	for _, h := range plan.Handles {
		if r, ok := n.Handle(h.ID); !ok || len(r.IPs) != 1 || r.IPs[0] != h.IPs[0] {
			t.Fatalf("record of %s: %+v, %v; want %v", h.ID, r, ok, h.IPs)
		}
	}
}

// TestApplyStoreManyHandles: a node of 300 handles — more records than
// one write may change — is imported in several writes within the
// store's limits and reads back whole; a second run writes nothing.
func TestApplyStoreManyHandles(t *testing.T) {
	for _, b := range kvbackedtest.KVBackends {
		t.Run(b.Name, func(t *testing.T) {
			cs := &kvbackedtest.Counting{Store: b.Open(t)}
			s := kvbacked.New(cs)
			t.Cleanup(func() { s.Close() })
			plan := bigPlan(300)
			res, err := importer.ApplyStore(t.Context(), s, plan, false)
			if err != nil {
				t.Fatal(err)
			}
			if got := statuses(res); got["handle created"] != 300 {
				t.Fatalf("statuses %v", got)
			}
			if w := headWrites(cs.Ops()); w < 3 {
				t.Fatalf("the node was written in %d writes, want several (limit %d parts a write)", w, s.Limits().MaxWriteParts)
			}
			checkBig(t, s, plan)
			checkStore(t, s)
			cs.Reset()
			res, err = importer.ApplyStore(t.Context(), s, plan, false)
			if got := statuses(res); err != nil || got["handle present"] != 300 {
				t.Fatalf("second run: %v, %v", got, err)
			}
			if _, _, txns := cs.Counts(); txns != 0 {
				t.Fatalf("second run wrote %d transactions", txns)
			}
		})
	}
}

// TestApplyStoreManyHandlesCrash: the import of a node of 300 handles
// killed before each of its writes leaves a valid store holding part of
// it; the import run again completes it, equal to one run uncut.
func TestApplyStoreManyHandlesCrash(t *testing.T) {
	for _, b := range kvbackedtest.KVBackends {
		t.Run(b.Name, func(t *testing.T) {
			partial := 0 // crashes between two writes of the node
			for crash := 1; ; crash++ {
				if crash > 20 {
					t.Fatal("the import never completed")
				}
				cs := &kvbackedtest.Counting{Store: b.Open(t), FailTxn: crash}
				s := kvbacked.New(cs)
				plan := bigPlan(300)
				_, err := importer.ApplyStore(t.Context(), s, plan, false)
				if err == nil {
					if crash < 5 { // pool, claim, and the node in 3 writes or more
						t.Fatalf("the import completed in %d transactions", crash-1)
					}
					s.Close()
					if partial < 2 {
						t.Fatalf("%d crashes left part of the node's records, want one between each two of its writes", partial)
					}
					break
				}
				if !errors.Is(err, kvbackedtest.ErrCrash) {
					t.Fatalf("crash at transaction %d: %v", crash, err)
				}
				checkPartial(t, s, plan) // every node object reads back valid
				if n, err := s.GetNode(t.Context(), bigNode); err == nil && len(n.Handles) > 0 && len(n.Handles) < 300 {
					partial++
				}
				cs.FailTxn = 0
				if _, err := importer.ApplyStore(t.Context(), s, plan, false); err != nil {
					t.Fatalf("rerun after a crash at transaction %d: %v", crash, err)
				}
				checkBig(t, s, plan)
				checkStore(t, s)
				s.Close()
			}
		})
	}
}

// headWrites counts the transactions of ops that put bigNode's head: the
// writes of its object.
func headWrites(ops [][]kv.Op) int {
	n := 0
	for _, txn := range ops {
		if slices.ContainsFunc(txn, func(op kv.Op) bool { return strings.HasSuffix(op.Key, kvbacked.NodeHeadKey(bigNode)) }) {
			n++
		}
	}
	return n
}
