package storage_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/storetest"
)

var (
	clusterV4 = ipam.Pool{Name: "cluster-v4", CIDR: netip.MustParsePrefix("10.100.0.0/16"), BlockSize: 26}
	clusterV6 = ipam.Pool{Name: "cluster-v6", CIDR: netip.MustParsePrefix("fd00:100::/64"), BlockSize: 122}
)

// cluster runs ops on nodes nodes, workers per node at once, each
// operation by a fresh allocator holding its node's lock, and returns
// the first error.
func cluster(ctx context.Context, s store.Store, nodes, workers, perNode int, op func(a *allocator.Allocator, node string, i int) error) error {
	var (
		wg    sync.WaitGroup
		first error
		mu    sync.Mutex
	)
	for n := range nodes {
		node := fmt.Sprint("node-", n)
		var lock sync.Mutex // the node's lock, as plugin processes share it
		next := 0
		for range workers {
			wg.Go(func() {
				for {
					lock.Lock()
					i := next
					next++
					if i >= perNode {
						lock.Unlock()
						return
					}
					err := op(allocator.New(s, nil), node, i)
					lock.Unlock()
					if err != nil {
						mu.Lock()
						if first == nil {
							first = fmt.Errorf("%s op %d: %w", node, i, err)
						}
						mu.Unlock()
						return
					}
				}
			})
		}
	}
	wg.Wait()
	return first
}

func request(node string, i int) allocator.Request {
	c := fmt.Sprintf("%s-c%04d", node, i)
	return allocator.Request{
		Handle: ipam.Handle{ID: ipam.HandleID("k8s", c, "eth0"), Network: "k8s", ContainerID: c, IfName: "eth0",
			Node: node, Namespace: "default", Pod: "pod-" + c, PodUID: "uid-" + c, NetNS: "/var/run/netns/" + c},
		Sets: [][]string{{clusterV4.Name}, {clusterV6.Name}},
	}
}

// TestClusterChurn: 20 nodes × 8 concurrent ADDs each, 2 000 dual-stack
// allocations, then the release of all of them, on every backend: every
// ADD's addresses are held by it alone, and nothing is left after.
func TestClusterChurn(t *testing.T) {
	const nodes, workers, perNode = 20, 8, 100
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			s := b.open(t)
			ctx := t.Context()
			a := allocator.New(s, nil)
			for _, p := range []ipam.Pool{clusterV4, clusterV6} {
				if _, err := a.EnsurePool(ctx, p); err != nil {
					t.Fatal(err)
				}
			}
			var mu sync.Mutex
			got := map[string]ipam.Handle{}
			start := time.Now()
			err := cluster(ctx, s, nodes, workers, perNode, func(a *allocator.Allocator, node string, i int) error {
				h, err := a.Allocate(ctx, request(node, i))
				mu.Lock()
				got[h.ID] = h
				mu.Unlock()
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			added := time.Since(start)
			held := storetest.Holders(t, s)
			if len(got) != nodes*perNode || len(held) != 2*nodes*perNode {
				t.Fatalf("%d ADDs returned, %d addresses held; want %d and %d", len(got), len(held), nodes*perNode, 2*nodes*perNode)
			}
			for id, h := range got {
				for _, ip := range h.IPs {
					if held[ip.Addr] != id {
						t.Fatalf("%s returned to %s is held by %q", ip.Addr, id, held[ip.Addr])
					}
				}
			}
			start = time.Now()
			err = cluster(ctx, s, nodes, workers, perNode, func(a *allocator.Allocator, node string, i int) error {
				freed, err := a.Release(ctx, node, request(node, i).Handle.ID)
				if err == nil && len(freed) != 2 {
					err = fmt.Errorf("released %v, want 2 addresses", freed)
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d dual-stack ADDs in %v, their DELs in %v", b.name, nodes*perNode, added.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
			if h := storetest.Holders(t, s); len(h) != 0 {
				t.Fatalf("%d addresses held after every DEL", len(h))
			}
			nodeObjs, err := s.ListNodes(ctx, store.NodeSelector{})
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range nodeObjs {
				if len(n.Handles) > 0 || len(n.Loans) > 0 {
					t.Fatalf("node object %s keeps %d records and %d loans", n.Name, len(n.Handles), len(n.Loans))
				}
			}
		})
	}
}
