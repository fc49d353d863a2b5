package controller

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// sample returns the value of metric name with exactly the given labels
// in what reg gathers, and whether it is there.
func sample(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !sameLabels(m.GetLabel(), labels) {
				continue
			}
			switch {
			case m.Gauge != nil:
				return m.GetGauge().GetValue(), true
			case m.Counter != nil:
				return m.GetCounter().GetValue(), true
			}
		}
	}
	return 0, false
}

func sameLabels(ls []*dto.LabelPair, want map[string]string) bool {
	if len(ls) != len(want) {
		return false
	}
	for _, l := range ls {
		if v, ok := want[l.GetName()]; !ok || v != l.GetValue() {
			return false
		}
	}
	return true
}

// TestPassPoolForecast: each pass sets, per pool, the claimed and free
// blocks, counts the addresses newly held and no longer held since the
// previous pass, and forecasts exhaustion from the net change of the
// addresses in use since the oldest pass of the window: absent after one
// pass, free/rate while the pool fills, 0 once full, +Inf when it drains.
// A replica that stops leading drops every pool series. IPv4 and IPv6.
func TestPassPoolForecast(t *testing.T) {
	for _, f := range passFamilies {
		t.Run(f.name, func(t *testing.T) {
			r := newRig(t, time.Hour)
			ctx := context.Background()
			r.alloc(func(a *allocator.Allocator) {
				for _, p := range []ipam.Pool{f.pool, f.tiny} {
					if _, err := a.EnsurePool(ctx, p); err != nil {
						t.Fatal(err)
					}
				}
			})
			node := r.node("a")
			get := func(name string, labels map[string]string) (float64, bool) {
				t.Helper()
				return sample(t, r.m.Registry, name, labels)
			}
			pool := func(p ipam.Pool) map[string]string { return map[string]string{"pool": p.Name} }
			want := func(name string, labels map[string]string, v float64) {
				t.Helper()
				got, ok := get(name, labels)
				if !ok || got != v && !(math.IsInf(v, 1) && math.IsInf(got, 1)) {
					t.Errorf("%s%v = %v (present %v), want %v", name, labels, got, ok, v)
				}
			}
			absent := func(name string, labels map[string]string) {
				t.Helper()
				if v, ok := get(name, labels); ok {
					t.Errorf("%s%v = %v, want no series", name, labels, v)
				}
			}
			blocks := float64(f.pool.NumBlocks())
			usable := float64(f.pool.Usable())

			r.pass(t0)
			want("ipkeeper_pool_blocks", map[string]string{"pool": f.pool.Name, "state": "claimed"}, 0)
			want("ipkeeper_pool_blocks", map[string]string{"pool": f.pool.Name, "state": "free"}, blocks)
			want("ipkeeper_pool_allocations_observed_total", pool(f.pool), 0)
			absent("ipkeeper_pool_exhaustion_seconds", pool(f.pool))

			// A minute later: two addresses more.
			var hs []ipam.Handle
			for _, c := range []string{"c0", "c1"} {
				hs = append(hs, r.attach(f.pool, c, "", "", node, t0))
			}
			r.attach(f.tiny, "t0", "", "", node, t0)
			r.pass(t0.Add(time.Minute))
			want("ipkeeper_pool_blocks", map[string]string{"pool": f.pool.Name, "state": "claimed"}, 1)
			want("ipkeeper_pool_blocks", map[string]string{"pool": f.pool.Name, "state": "free"}, blocks-1)
			want("ipkeeper_pool_allocations_observed_total", pool(f.pool), 2)
			want("ipkeeper_pool_releases_observed_total", pool(f.pool), 0)
			want("ipkeeper_pool_net_allocation_rate", pool(f.pool), 2.0/60)
			want("ipkeeper_pool_exhaustion_window_seconds", pool(f.pool), 60)
			want("ipkeeper_pool_exhaustion_seconds", pool(f.pool), (usable-2)/(2.0/60))

			// Another minute: one released, three allocated; the tiny
			// pool's last address taken.
			r.alloc(func(a *allocator.Allocator) {
				if _, err := a.Release(ctx, node, hs[0].ID); err != nil {
					t.Fatal(err)
				}
			})
			for _, c := range []string{"c2", "c3", "c4"} {
				hs = append(hs, r.attach(f.pool, c, "", "", node, t0))
			}
			r.attach(f.tiny, "t1", "", "", node, t0)
			r.pass(t0.Add(2 * time.Minute))
			want("ipkeeper_pool_allocations_observed_total", pool(f.pool), 5)
			want("ipkeeper_pool_releases_observed_total", pool(f.pool), 1)
			want("ipkeeper_pool_net_allocation_rate", pool(f.pool), 4.0/120)
			want("ipkeeper_pool_exhaustion_window_seconds", pool(f.pool), 120)
			want("ipkeeper_pool_exhaustion_seconds", pool(f.pool), (usable-4)/(4.0/120))
			want("ipkeeper_pool_exhaustion_seconds", pool(f.tiny), 0)

			// Everything released: the pool drains.
			r.alloc(func(a *allocator.Allocator) {
				for _, h := range hs[1:] {
					if _, err := a.Release(ctx, node, h.ID); err != nil {
						t.Fatal(err)
					}
				}
			})
			r.pass(t0.Add(3 * time.Minute))
			want("ipkeeper_pool_releases_observed_total", pool(f.pool), 5)
			want("ipkeeper_pool_net_allocation_rate", pool(f.pool), 0)
			want("ipkeeper_pool_exhaustion_seconds", pool(f.pool), math.Inf(1))

			r.m.setLeading(true)
			r.m.setLeading(false)
			want("ipkeeper_leader", nil, 0)
			for _, name := range []string{"ipkeeper_pool_addresses", "ipkeeper_pool_blocks", "ipkeeper_pool_allocations_observed_total",
				"ipkeeper_pool_releases_observed_total", "ipkeeper_pool_net_allocation_rate", "ipkeeper_pool_exhaustion_seconds",
				"ipkeeper_pool_exhaustion_window_seconds"} {
				mfs, _ := r.m.Registry.Gather()
				for _, mf := range mfs {
					if mf.GetName() == name {
						t.Errorf("%d %s series after the replica stopped leading", len(mf.GetMetric()), name)
					}
				}
			}
		})
	}
}

// TestNodeNetworkNotReady: ipkeeper_node_network_not_ready is 1 for a
// node whose kubelet marks it not Ready because the runtime's network is
// not ready (what a failing CNI STATUS leads to), 0 for a Ready node and
// for one not Ready for another reason, read from the informer's cache
// of the real API server.
func TestNodeNetworkNotReady(t *testing.T) {
	r := newRig(t, time.Hour)
	ctx := context.Background()
	failing, other := r.node("status"), r.node("pleg")
	setReady := func(name string, st corev1.ConditionStatus, msg string) {
		t.Helper()
		n, err := r.admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st, Reason: "KubeletNotReady", Message: msg,
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		if _, err := r.admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor := func(name string, v float64) {
		t.Helper()
		r.waitCache(func() bool {
			got, ok := sample(t, r.m.Registry, "ipkeeper_node_network_not_ready", map[string]string{"node": name})
			return ok && got == v
		}, "ipkeeper_node_network_not_ready{node="+name+"} to be "+map[float64]string{0: "0", 1: "1"}[v])
	}
	waitFor(failing, 0)
	// The other node's change first: one watch delivers them in order, so
	// once the failing node shows, the other one's change is in the cache.
	setReady(other, corev1.ConditionFalse, "PLEG is not healthy: pleg was last seen active 3m0s ago")
	setReady(failing, corev1.ConditionFalse, "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "+
		"message:Network plugin returns error: plugin type=\"bridge\" failed (status): ipkeeper: the datastore does not answer")
	waitFor(failing, 1)
	waitFor(other, 0)
	setReady(failing, corev1.ConditionTrue, "kubelet is posting ready status")
	waitFor(failing, 0)
}
