package allocator_test

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked/kvbackedtest"
)

// storeBackends runs fn on a fresh store of every real kv backend.
func storeBackends(t *testing.T, fn func(t *testing.T, s store.Store)) {
	kvbackedtest.Backends(t, func(t *testing.T, s *kvbacked.Store) { fn(t, s) })
}

func TestMain(m *testing.M) {
	code := m.Run()
	kvbackedtest.Stop()
	os.Exit(code)
}

var (
	v4Pool = ipam.Pool{Name: "v4", CIDR: netip.MustParsePrefix("10.9.0.0/24"), BlockSize: 28, Gateway: netip.MustParseAddr("10.9.0.1")}
	v6Pool = ipam.Pool{Name: "v6", CIDR: netip.MustParsePrefix("fd00:9::/120"), BlockSize: 124}
)

func newAllocator(t *testing.T, s store.Store, pools ...ipam.Pool) *allocator.Allocator {
	t.Helper()
	a := allocator.New(s, nil)
	for _, p := range pools {
		if _, err := a.EnsurePool(t.Context(), p); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

// podRequest is the request of pod-<container>'s eth0 on node, one
// pool set per name in pools.
func podRequest(node, container string, pools ...string) allocator.Request {
	r := allocator.Request{Handle: ipam.Handle{
		ID: ipam.HandleID("net", container, "eth0"), Network: "net", ContainerID: container, IfName: "eth0",
		Node: node, Namespace: "default", Pod: "pod-" + container, PodUID: "uid-" + container,
	}}
	for _, p := range pools {
		r.Sets = append(r.Sets, []string{p})
	}
	return r
}

// counted wraps a real store and counts reads and writes.
type counted struct {
	store.Store
	reads, writes atomic.Int64
	// failWrite, when set, fails the writes it returns true for.
	failWrite func(kind string, n store.Node) error
}

func (c *counted) GetNode(ctx context.Context, name string) (store.Node, error) {
	c.reads.Add(1)
	return c.Store.GetNode(ctx, name)
}

func (c *counted) GetPool(ctx context.Context, name string) (store.Pool, error) {
	c.reads.Add(1)
	return c.Store.GetPool(ctx, name)
}

func (c *counted) GetClaim(ctx context.Context, ref store.BlockRef) (store.Claim, error) {
	c.reads.Add(1)
	return c.Store.GetClaim(ctx, ref)
}

func (c *counted) ListClaims(ctx context.Context, sel store.ClaimSelector) ([]store.Claim, error) {
	c.reads.Add(1)
	return c.Store.ListClaims(ctx, sel)
}

func (c *counted) ListNodes(ctx context.Context, sel store.NodeSelector) ([]store.Node, error) {
	c.reads.Add(1)
	return c.Store.ListNodes(ctx, sel)
}

func (c *counted) write(kind string, n store.Node) error {
	c.writes.Add(1)
	if c.failWrite != nil {
		return c.failWrite(kind, n)
	}
	return nil
}

func (c *counted) CreateNode(ctx context.Context, n store.Node) (store.Node, error) {
	if err := c.write("create", n); err != nil {
		return store.Node{}, err
	}
	return c.Store.CreateNode(ctx, n)
}

func (c *counted) UpdateNode(ctx context.Context, n store.Node) (store.Node, error) {
	if err := c.write("update", n); err != nil {
		return store.Node{}, err
	}
	return c.Store.UpdateNode(ctx, n)
}

func (c *counted) CreateClaim(ctx context.Context, cl store.Claim) (store.Claim, error) {
	c.writes.Add(1)
	return c.Store.CreateClaim(ctx, cl)
}

// loans returns every loan in the store as "node:handle->lender".
func loans(t *testing.T, s store.Store) []string {
	t.Helper()
	nodes, err := s.ListNodes(t.Context(), store.NodeSelector{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range nodes {
		for _, l := range n.Loans {
			out = append(out, n.Name+":"+l.Handle+"->"+l.Lender)
		}
	}
	return out
}

var errInjected = errors.New("injected write failure")
