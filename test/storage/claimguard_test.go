package storage_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/allocator/allocatortest"
	"github.com/ipkeeper/ipkeeper/internal/consistency"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// guardV4 has few blocks, claimed in address order: node-b's first ADD
// claims the block below node-a's.
var guardV4 = ipam.Pool{Name: "guard-v4", CIDR: netip.MustParsePrefix("10.101.0.0/24"), BlockSize: 28}

// countingStore counts the requests an allocator sends through it.
type countingStore struct {
	store.Store
	reads, writes atomic.Int64
}

func (c *countingStore) GetNode(ctx context.Context, name string) (store.Node, error) {
	c.reads.Add(1)
	return c.Store.GetNode(ctx, name)
}

func (c *countingStore) GetPool(ctx context.Context, name string) (store.Pool, error) {
	c.reads.Add(1)
	return c.Store.GetPool(ctx, name)
}

func (c *countingStore) ListPools(ctx context.Context) ([]store.Pool, error) {
	c.reads.Add(1)
	return c.Store.ListPools(ctx)
}

func (c *countingStore) GetClaim(ctx context.Context, ref store.BlockRef) (store.Claim, error) {
	c.reads.Add(1)
	return c.Store.GetClaim(ctx, ref)
}

func (c *countingStore) ListClaims(ctx context.Context, sel store.ClaimSelector) ([]store.Claim, error) {
	c.reads.Add(1)
	return c.Store.ListClaims(ctx, sel)
}

func (c *countingStore) ListNodes(ctx context.Context, sel store.NodeSelector) ([]store.Node, error) {
	c.reads.Add(1)
	return c.Store.ListNodes(ctx, sel)
}

func (c *countingStore) CreateNode(ctx context.Context, n store.Node) (store.Node, error) {
	c.writes.Add(1)
	return c.Store.CreateNode(ctx, n)
}

func (c *countingStore) UpdateNode(ctx context.Context, n store.Node) (store.Node, error) {
	c.writes.Add(1)
	return c.Store.UpdateNode(ctx, n)
}

func (c *countingStore) CreateClaim(ctx context.Context, cl store.Claim) (store.Claim, error) {
	c.writes.Add(1)
	return c.Store.CreateClaim(ctx, cl)
}

func guardReq(node, container string) allocator.Request {
	return allocator.Request{
		Handle: ipam.Handle{ID: ipam.HandleID("k8s", container, "eth0"), Network: "k8s", ContainerID: container, IfName: "eth0",
			Node: node, Namespace: "default", Pod: "pod-" + container, PodUID: "uid-" + container},
		Sets: [][]string{{guardV4.Name}},
	}
}

// TestForgedNodeObject: on every backend, node-a's object rewritten with
// node-a's own credentials (the kubernetes backend opens as the
// ipkeeper-node ServiceAccount with deploy/'s RBAC) with node-b's block in
// it, node-b's held address first in its free queue: the next ADD on
// node-a — by a fresh allocator (a plugin process) and by the long-lived
// one that made the earlier ADDs (the agent) — fails naming the block and
// node-b, neither object changes, and `ipkeeperctl check` reports the
// block. The warm ADD before the forgery sent one request, the write. On
// Kubernetes, where a block's state is in its claim's IPAMBlock, the
// forged write itself is refused and changes nothing.
func TestForgedNodeObject(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			s := b.open(t)
			cs := &countingStore{Store: s}
			warm := allocator.New(cs, nil)
			warm.PoolCacheTTL = time.Hour // the pool read once: the count is the guard's
			if _, err := warm.EnsurePool(ctx, guardV4); err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct{ node, container string }{{"node-b", "b0"}, {"node-b", "b1"}, {"node-a", "a0"}} {
				if _, err := warm.Allocate(ctx, guardReq(c.node, c.container)); err != nil {
					t.Fatal(err)
				}
			}
			r0, w0 := cs.reads.Load(), cs.writes.Load()
			if _, err := warm.Allocate(ctx, guardReq("node-a", "a1")); err != nil {
				t.Fatal(err)
			}
			if r, w := cs.reads.Load()-r0, cs.writes.Load()-w0; r != 0 || w != 1 {
				t.Fatalf("a warm ADD sent %d reads and %d writes, want the one write", r, w)
			}
			ref := store.BlockRef{Pool: guardV4.Name, CIDR: guardV4.BlockAt(0)}
			victim, err := s.GetNode(ctx, "node-b")
			if err != nil {
				t.Fatal(err)
			}
			if _, held := victim.Block(ref); !held {
				t.Fatalf("node-b does not hold %s: %+v", ref, victim.Blocks)
			}
			if b.name == "kubernetes" {
				// A block's state is in its claim's object: node-a's
				// object cannot take on node-b's block at all.
				own, err := s.GetNode(ctx, "node-a")
				if err != nil {
					t.Fatal(err)
				}
				vb, _ := victim.Block(ref)
				forged, _ := allocatortest.WithStolenBlock(own, vb)
				if _, err := s.UpdateNode(ctx, forged); !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), `"node-b"`) {
					t.Fatalf("write of node-a's object holding node-b's block: %v; want ErrConflict naming node-b", err)
				}
				for _, want := range []store.Node{victim, own} {
					if n, err := s.GetNode(ctx, want.Name); err != nil || n.Version != want.Version {
						t.Fatalf("node object %s: version %q, %v; want %q unchanged", want.Name, n.Version, err, want.Version)
					}
				}
				return
			}
			forged, stolen := allocatortest.Steal(t, s, "node-a", "node-b", ref)
			for _, al := range []struct {
				name string
				a    *allocator.Allocator
			}{{"fresh", allocator.New(s, nil)}, {"warm", warm}} {
				h, err := al.a.Allocate(ctx, guardReq("node-a", "a2-"+al.name))
				if !errors.Is(err, allocator.ErrBlockNotClaimed) || !strings.Contains(err.Error(), ref.String()) || !strings.Contains(err.Error(), `"node-b"`) {
					t.Fatalf("%s allocator: ADD on node-a = %v, %v; want %v naming %s and node-b (node-b's %s is the stolen address)",
						al.name, h.IPs, err, allocator.ErrBlockNotClaimed, ref, stolen)
				}
			}
			for _, want := range []store.Node{victim, forged} {
				n, err := s.GetNode(ctx, want.Name)
				if err != nil || n.Version != want.Version {
					t.Fatalf("node object %s: version %q, %v; want %q unchanged", want.Name, n.Version, err, want.Version)
				}
			}
			r, err := consistency.CheckStore(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			if !reported(r, consistency.KindClaimMismatch, "node-a", ref) {
				t.Fatalf("check: %v; want %s for node-a's block %s", r.Err(), consistency.KindClaimMismatch, ref)
			}
		})
	}
}

// reported reports whether r has a problem of kind at node's block ref.
func reported(r consistency.Report, kind consistency.Kind, node string, ref store.BlockRef) bool {
	for _, p := range r.Problems {
		if p.Kind == kind && p.Node == node && p.Pool == ref.Pool && p.Block == ref.CIDR.String() {
			return true
		}
	}
	return false
}
