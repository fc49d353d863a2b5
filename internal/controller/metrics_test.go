package controller

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// TestPassPoolMetrics: every pass sets ipkeeper_pool_addresses of every
// pool from the store it read — total (what the pool may hand out),
// in_use, and free (the free addresses of claimed blocks plus unclaimed
// ones) — and drops the series of a pool that is gone. On every datastore
// type, IPv4 and IPv6.
func TestPassPoolMetrics(t *testing.T) {
	for _, backend := range backends {
		for _, f := range passFamilies {
			t.Run(backend+"/"+f.name, func(t *testing.T) {
				r := newRigOn(t, time.Hour, backend)
				ctx := context.Background()
				r.alloc(func(a *allocator.Allocator) {
					for _, p := range []ipam.Pool{f.pool, f.tiny} {
						if _, err := a.EnsurePool(ctx, p); err != nil {
							t.Fatal(err)
						}
					}
				})
				nodeA, nodeB := r.node("a"), r.node("b")
				var hs []ipam.Handle
				for i, node := range []string{nodeA, nodeA, nodeA, nodeB} {
					hs = append(hs, r.attach(f.pool, "c"+string(rune('0'+i)), "", "", node, t0))
				}
				hs = append(hs, r.attach(f.tiny, "t0", "", "", nodeB, t0))
				want := func(p ipam.Pool, inUse uint64) {
					t.Helper()
					total := p.Usable()
					for state, n := range map[string]uint64{"total": total, "in_use": inUse, "free": total - inUse} {
						if got := testutil.ToFloat64(r.m.poolAddresses.WithLabelValues(p.Name, state)); got != float64(n) {
							t.Errorf("ipkeeper_pool_addresses{pool=%q,state=%q} = %v, want %d", p.Name, state, got, n)
						}
					}
				}
				r.pass(t0)
				want(f.pool, 4)
				want(f.tiny, 1)

				// The tiny pool goes: its series go with it.
				r.alloc(func(a *allocator.Allocator) {
					if _, err := a.Release(ctx, nodeB, hs[4].ID); err != nil {
						t.Fatal(err)
					}
					if _, err := a.Release(ctx, nodeA, hs[0].ID); err != nil {
						t.Fatal(err)
					}
					if err := a.DeletePool(ctx, f.tiny.Name); err != nil {
						t.Fatal(err)
					}
				})
				r.pass(t0.Add(time.Second))
				want(f.pool, 3)
				if n := testutil.CollectAndCount(r.m.poolAddresses); n != 3 {
					t.Errorf("%d ipkeeper_pool_addresses series after pool %s was deleted, want pool %s's 3", n, f.tiny.Name, f.pool.Name)
				}
			})
		}
	}
}
