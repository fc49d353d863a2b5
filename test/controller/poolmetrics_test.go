package controller

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// storePools reads, per pool of the network's store, what the pool
// metrics must show: usable and in-use addresses, claimed and free
// blocks.
func storePools(n *network) map[string]map[string]float64 {
	n.t.Helper()
	out := map[string]map[string]float64{}
	n.withAllocator(func(a *allocator.Allocator) {
		snap, err := a.Observe(ctxT(n.t))
		if err != nil {
			n.t.Fatal(err)
		}
		for _, p := range snap.Pools {
			var inUse, claimed float64
			for _, b := range snap.Blocks {
				if b.Pool == p.Name {
					inUse += float64(b.InUse())
					claimed++
				}
			}
			first, last := p.BlockSpan()
			out[p.Name] = map[string]float64{
				`ipkeeper_pool_addresses{pool="%s",state="total"}`:  float64(p.Usable()),
				`ipkeeper_pool_addresses{pool="%s",state="in_use"}`: inUse,
				`ipkeeper_pool_addresses{pool="%s",state="free"}`:   float64(p.Usable()) - inUse,
				`ipkeeper_pool_blocks{pool="%s",state="claimed"}`:   claimed,
				`ipkeeper_pool_blocks{pool="%s",state="free"}`:      float64(last-first+1) - claimed,
			}
		}
	})
	return out
}

// waitPoolMetrics waits until a scrape shows every figure of want.
func (p *proc) waitPoolMetrics(want map[string]map[string]float64) {
	p.t.Helper()
	var diff []string
	for range 300 {
		page, err := p.scrape()
		if err != nil {
			p.t.Fatal(err)
		}
		diff = nil
		for pool, series := range want {
			for s, v := range series {
				s = fmt.Sprintf(s, pool)
				if !strings.Contains(page, s+" ") {
					diff = append(diff, s+" absent")
				} else if got := metricIn(page, s); got != v {
					diff = append(diff, fmt.Sprintf("%s = %v, want %v", s, got, v))
				}
			}
		}
		if len(diff) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.t.Fatalf("the pool metrics do not show what the store holds:\n  %s", strings.Join(diff, "\n  "))
}

// TestPoolMetricsMatchStore runs ipkeeper-controller against the real API
// server with the shipped RBAC and a dual-stack network: after
// allocations its /metrics shows, per pool, the addresses and blocks the
// store holds, counts the allocations and releases made while it ran,
// and forecasts exhaustion as free addresses over the net rate. A Node
// its kubelet marks not Ready for its runtime's network shows in
// ipkeeper_node_network_not_ready.
func TestPoolMetricsMatchStore(t *testing.T) {
	s := setup(t)
	c := newCluster(t, s)
	net := dualStack(t, "forecast", "10.79.0.0/24", "fd79::/120", map[string]any{"blockSize": 28, "ipv6BlockSize": 124})
	node := c.node("a")
	add := func(i int) ipam.Handle {
		name := fmt.Sprintf("web-%d", i)
		net.mustAdd(node, c.ns, name, c.pod(name, node), name)
		return net.handles()[name]
	}
	for i := range 3 {
		add(i)
	}
	p := startController(t, "controller", net.env(), singleFlags...)
	p.waitPasses(2)
	p.waitPoolMetrics(storePools(net))

	// Four more while it runs (counted once a pass has seen them all),
	// then one released. Each handle holds one address of each pool.
	var hs []ipam.Handle
	for i := 3; i < 7; i++ {
		hs = append(hs, add(i))
	}
	counted := func(inUse, allocs, releases float64) map[string]map[string]float64 {
		want := storePools(net)
		if len(want) != 2 {
			t.Fatalf("the store holds pools %v, want an IPv4 and an IPv6 one", want)
		}
		for pool, series := range want {
			if got := series[`ipkeeper_pool_addresses{pool="%s",state="in_use"}`]; got != inUse {
				t.Fatalf("pool %s: the store holds %v addresses in use, want %v", pool, got, inUse)
			}
			series[`ipkeeper_pool_allocations_observed_total{pool="%s"}`] = allocs
			series[`ipkeeper_pool_releases_observed_total{pool="%s"}`] = releases
		}
		return want
	}
	p.waitPoolMetrics(counted(7, 4, 0))
	net.withAllocator(func(a *allocator.Allocator) {
		if _, err := a.Release(context.Background(), node, hs[0].ID); err != nil {
			t.Fatal(err)
		}
	})
	c.deletePod("web-3")
	want := counted(6, 4, 1)
	p.waitPoolMetrics(want)

	// The forecast: free addresses over the net rate, on the window the
	// passes since the start span (read from one scrape; a pass may set
	// the three between two scrapes, so look again until one agrees).
	for pool, series := range want {
		free := series[`ipkeeper_pool_addresses{pool="%s",state="free"}`]
		var last string
		ok := false
		for range 100 {
			page, err := p.scrape()
			if err != nil {
				t.Fatal(err)
			}
			sec := metricIn(page, fmt.Sprintf(`ipkeeper_pool_exhaustion_seconds{pool="%s"}`, pool))
			rate := metricIn(page, fmt.Sprintf(`ipkeeper_pool_net_allocation_rate{pool="%s"}`, pool))
			win := metricIn(page, fmt.Sprintf(`ipkeeper_pool_exhaustion_window_seconds{pool="%s"}`, pool))
			last = fmt.Sprintf("exhaustion %v s, net rate %v/s, window %v s, %v free", sec, rate, win, free)
			if rate > 0 && win > 0 && math.Abs(sec-free/rate) <= 1e-9*sec {
				ok = true
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if !ok {
			t.Errorf("pool %s: %s; want a positive net rate and exhaustion = free / rate", pool, last)
		}
	}

	// The node's runtime network fails: the kubelet's Ready condition.
	nd, err := c.client.CoreV1().Nodes().Get(ctxT(t), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nd.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady",
		Message:           "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: ipkeeper: no answer",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if _, err := c.client.CoreV1().Nodes().UpdateStatus(ctxT(t), nd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	p.waitMetric(time.Minute, fmt.Sprintf(`ipkeeper_node_network_not_ready{node="%s"}`, node), func(v float64) bool { return v == 1 })
}
