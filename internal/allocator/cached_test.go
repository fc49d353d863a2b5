package allocator_test

import (
	"context"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// staleClaims wraps a real store; its cached claim lists answer from a
// copy taken earlier, as a watch cache that has not caught up.
type staleClaims struct {
	store.Store
	stale []store.Claim
}

func (s *staleClaims) ListClaims(ctx context.Context, sel store.ClaimSelector) ([]store.Claim, error) {
	if !sel.Cached {
		return s.Store.ListClaims(ctx, sel)
	}
	var out []store.Claim
	for _, c := range s.stale {
		if (sel.Node == "" || c.Node == sel.Node) && (sel.Pool == "" || c.Pool == sel.Pool) {
			out = append(out, c)
		}
	}
	return out, nil
}

// TestStaleClaimListNeverAdopted: an ADD adopts the claims a cached list
// shows for its node only when they still name it. A claim deleted and
// made again by another node (the block is that node's now) is skipped;
// one that still exists is adopted.
func TestStaleClaimListNeverAdopted(t *testing.T) {
	storeBackends(t, func(t *testing.T, s store.Store) {
		ctx := t.Context()
		newAllocator(t, s, v4Pool)
		claim := func(i uint64, node string) store.Claim {
			c, err := s.CreateClaim(ctx, store.Claim{BlockRef: store.BlockRef{Pool: v4Pool.Name, CIDR: v4Pool.BlockAt(i)}, Node: node})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		gone, kept := claim(3, "node-a"), claim(5, "node-a")
		stale, err := s.ListClaims(ctx, store.ClaimSelector{})
		if err != nil {
			t.Fatal(err)
		}
		// The block of gone changes hands after the copy was taken.
		if err := s.DeleteClaim(ctx, gone); err != nil {
			t.Fatal(err)
		}
		claim(3, "node-b")
		a := newAllocator(t, &staleClaims{Store: s, stale: stale}, v4Pool)
		h, err := a.Allocate(ctx, podRequest("node-a", "c1", v4Pool.Name))
		if err != nil {
			t.Fatal(err)
		}
		if gone.CIDR.Contains(h.IPs[0].Addr) {
			t.Fatalf("node-a allocated %s in %s, a block node-b claims (adopted from a stale list)", h.IPs[0].Addr, gone.CIDR)
		}
		n, err := s.GetNode(ctx, "node-a")
		if err != nil {
			t.Fatal(err)
		}
		if _, held := n.Block(gone.BlockRef); held {
			t.Fatalf("node-a holds %s, which node-b claims", gone.CIDR)
		}
		if _, held := n.Block(kept.BlockRef); !held || !kept.CIDR.Contains(h.IPs[0].Addr) {
			t.Fatalf("node-a's object %+v, address %s: want its claim %s adopted and used", n.Blocks, h.IPs[0].Addr, kept.CIDR)
		}
	})
}
