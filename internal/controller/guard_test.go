package controller

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// hook is run once, when armed, on the store of the controller's next
// access to a single node object — a read or a write: a release writes
// the object the pass listed, or reads it again after a conflict — before
// that access.
type hook struct {
	mu sync.Mutex
	f  func(s store.Store)
}

func (h *hook) arm(f func(s store.Store)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.f = f
}

func (h *hook) run(s store.Store) {
	h.mu.Lock()
	f := h.f
	h.f = nil
	h.mu.Unlock()
	if f != nil {
		f(s)
	}
}

// beforeAccess is the controller's store, running h.
type beforeAccess struct {
	store.Store
	h *hook
}

func (b beforeAccess) GetNode(ctx context.Context, name string) (store.Node, error) {
	b.h.run(b.Store)
	return b.Store.GetNode(ctx, name)
}

func (b beforeAccess) UpdateNode(ctx context.Context, n store.Node) (store.Node, error) {
	b.h.run(b.Store)
	return b.Store.UpdateNode(ctx, n)
}

func (b beforeAccess) DeleteNode(ctx context.Context, n store.Node) error {
	b.h.run(b.Store)
	return b.Store.DeleteNode(ctx, n)
}

// TestPassGuardedRelease: a leak confirmed by a pass is released guarded
// by the record that pass read. When the handle is released (a late DEL)
// and its container allocated again — the same ID and, the pool being
// tiny, the same address, for another pod — after the pass read the store
// and before its release, the new allocation is kept and the skip is
// counted. On every datastore type, IPv4 and IPv6.
func TestPassGuardedRelease(t *testing.T) {
	for _, backend := range backends {
		for _, f := range passFamilies {
			t.Run(backend+"/"+f.name, func(t *testing.T) {
				const grace = time.Minute
				r := newRigOn(t, grace, backend)
				ctx := context.Background()
				h := &hook{}
				open := r.c.cfg.Open
				r.c.cfg.Open = func(ctx context.Context) (store.Store, error) {
					s, err := open(ctx)
					if err != nil {
						return nil, err
					}
					return beforeAccess{Store: s, h: h}, nil
				}
				r.alloc(func(a *allocator.Allocator) {
					if _, err := a.EnsurePool(ctx, f.tiny); err != nil {
						t.Fatal(err)
					}
				})
				node := r.node("a")
				uid := r.pod("ghost", node, corev1.PodRunning)
				ghost := r.attach(f.tiny, "ghost", "ghost", uid, node, t0)
				r.deletePod("ghost")
				r.pass(t0)

				r.clock.Set(t0.Add(grace))
				var again ipam.Handle
				var hookErr error
				h.arm(func(s store.Store) {
					// The controller's own store: a local file admits
					// one opener at a time.
					a := allocator.New(s, nil)
					a.Now = func() time.Time { return t0.Add(grace / 2) }
					if _, hookErr = a.Release(ctx, node, ghost.ID); hookErr != nil {
						return
					}
					if _, hookErr = a.Allocate(ctx, allocator.Request{Handle: ipam.Handle{ID: "filler", Network: "net", ContainerID: "filler", IfName: "eth0", Node: node},
						Sets: [][]string{{f.tiny.Name}}}); hookErr != nil {
						return
					}
					again, hookErr = a.Allocate(ctx, allocator.Request{
						Handle: ipam.Handle{ID: ghost.ID, Network: "net", ContainerID: "ghost", IfName: "eth0",
							Node: node, Namespace: r.ns, Pod: "ghost2", PodUID: "ghost-uid-2"},
						Sets: [][]string{{f.tiny.Name}}})
				})
				if _, err := r.c.Pass(ctx); err != nil {
					t.Fatal(err)
				}
				if hookErr != nil {
					t.Fatalf("releasing and allocating again between the pass's read and its release: %v", hookErr)
				}
				if again.IPs[0] != ghost.IPs[0] {
					t.Fatalf("test setup: the ghost's address %v did not come back (%v)", ghost.IPs[0], again.IPs[0])
				}
				if h, ok := r.handles()["ghost"]; !ok || h.Pod != "ghost2" || h.IPs[0] != ghost.IPs[0] {
					t.Fatalf("the allocation made after the pass read the store was released: %+v", h)
				}
				if n := testutil.ToFloat64(r.m.releaseSkips.WithLabelValues("changed")); n != 1 {
					t.Errorf("ipkeeper_release_skips_total{why=changed} = %v, want 1", n)
				}
				if n := testutil.ToFloat64(r.m.releases.WithLabelValues("pod-gone")); n != 0 {
					t.Errorf("ipkeeper_releases_total{reason=pod-gone} = %v, want 0", n)
				}
			})
		}
	}
}
