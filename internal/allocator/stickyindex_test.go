package allocator_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked/kvbackedtest"
)

// indexCounted counts the lists of every node object; hidden hides the
// sticky index (as a store written before it existed looks).
type indexCounted struct {
	store.Store
	fullLists atomic.Int64
	hidden    bool
}

func (s *indexCounted) ListNodes(ctx context.Context, sel store.NodeSelector) ([]store.Node, error) {
	switch {
	case sel == (store.NodeSelector{}):
		s.fullLists.Add(1)
	case sel.Sticky != "" && s.hidden:
		return nil, nil
	}
	return s.Store.ListNodes(ctx, sel)
}

// TestStickyIndexLookup: the ADD of an identity with a parked
// reservation finds it through the index, without listing every node
// object, on the same node and on another; with the index hidden it
// finds it by that list, and either way the address comes back.
func TestStickyIndexLookup(t *testing.T) {
	for _, hidden := range []bool{false, true} {
		t.Run(fmt.Sprintf("hidden=%v", hidden), func(t *testing.T) {
			storeBackends(t, func(t *testing.T, s store.Store) {
				ctx := t.Context()
				cs := &indexCounted{Store: s}
				a := newAllocator(t, cs, v4Pool)
				h, err := a.AllocateSticky(ctx, stickyRequest("node-a", "c1", v4Pool.Name))
				if err != nil {
					t.Fatal(err)
				}
				want := h.IPs[0].Addr
				cs.hidden = hidden
				for i, node := range []string{"node-a", "node-b"} {
					if _, parked, err := a.ReleaseOrPark(ctx, h.Node, h.ID); err != nil || !parked {
						t.Fatalf("DEL: %v %v", parked, err)
					}
					cs.fullLists.Store(0)
					if h, err = a.AllocateSticky(ctx, stickyRequest(node, fmt.Sprint("c", i+2), v4Pool.Name)); err != nil {
						t.Fatal(err)
					}
					if h.IPs[0].Addr != want || h.Node != node {
						t.Fatalf("ADD on %s: %v on %s, want %s", node, h.IPs, h.Node, want)
					}
					if n := cs.fullLists.Load(); n != 0 && !hidden || n == 0 && hidden {
						t.Fatalf("ADD on %s listed every node object %d times (index hidden: %v)", node, n, hidden)
					}
					checkClean(t, s)
				}
			})
		})
	}
}

// BenchmarkStickyAdd measures the ADD of a sticky identity whose
// reservation is parked on another node (DEL, then ADD: the move and
// back), with nodes node objects in the store, through the index
// ("index") and through the list of every node object it replaces
// ("scan": the index hidden).
func BenchmarkStickyAdd(b *testing.B) {
	for _, nodes := range []int{10, 1000} {
		for _, mode := range []string{"scan", "index"} {
			b.Run(fmt.Sprintf("nodes=%d/%s", nodes, mode), func(b *testing.B) {
				s := kvbacked.New(kvbackedtest.OpenLocalKV(b))
				defer s.Close()
				cs := &indexCounted{Store: s, hidden: mode == "scan"}
				pool := ipam.Pool{Name: "big", CIDR: netip.MustParsePrefix("10.64.0.0/12"), BlockSize: 28}
				a := allocator.New(cs, nil)
				ctx := context.Background()
				if _, err := a.EnsurePool(ctx, pool); err != nil {
					b.Fatal(err)
				}
				for i := range nodes {
					if _, err := a.Allocate(ctx, podRequest(fmt.Sprintf("node-%04d", i), fmt.Sprint("p", i), pool.Name)); err != nil {
						b.Fatal(err)
					}
				}
				h, err := a.AllocateSticky(ctx, stickyRequest("node-0000", "s0", pool.Name))
				if err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for i := range b.N {
					if _, _, err := a.ReleaseOrPark(ctx, h.Node, h.ID); err != nil {
						b.Fatal(err)
					}
					node := fmt.Sprintf("node-%04d", (i+1)%2)
					if h, err = a.AllocateSticky(ctx, stickyRequest(node, fmt.Sprint("s", i+1), pool.Name)); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
