package controller

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/forecast"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// poolSeries are the per-pool metrics beside ipkeeper_pool_addresses:
// blocks, the changes passes observe, and the exhaustion forecast. Like
// ipkeeper_pool_addresses they are set by the leader's passes only and
// dropped when the replica stops leading, so that every series comes
// from the replica that reads the store now.
type poolSeries struct {
	blocks      *prometheus.GaugeVec
	allocations *prometheus.CounterVec
	releases    *prometheus.CounterVec
	netRate     *prometheus.GaugeVec
	exhaustion  *prometheus.GaugeVec
	window      *prometheus.GaugeVec
}

func newPoolSeries() poolSeries {
	return poolSeries{
		blocks: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ipkeeper_pool_blocks",
			Help: "Blocks of each pool by state, as the last reconcile pass read them: claimed (held by a node), free (in the pool's range and claimed by no node).",
		}, []string{"pool", "state"}),
		allocations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipkeeper_pool_allocations_observed_total",
			Help: "Addresses of each pool that a reconcile pass found held by a handle that did not hold them at this replica's previous pass. An address allocated and released between two passes is not counted; the first pass of a process counts nothing.",
		}, []string{"pool"}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipkeeper_pool_releases_observed_total",
			Help: "Addresses of each pool held at this replica's previous reconcile pass by a handle that no longer held them at the next (released by DEL, GC or the controller, or moved to another handle).",
		}, []string{"pool"}),
		netRate: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ipkeeper_pool_net_allocation_rate",
			Help: "Net change of each pool's addresses in use per second (allocations less releases), from the oldest to the newest reconcile pass within the forecast window.",
		}, []string{"pool"}),
		exhaustion: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ipkeeper_pool_exhaustion_seconds",
			Help: "Forecast seconds until the pool has no free address if ipkeeper_pool_net_allocation_rate holds: free addresses divided by that rate; 0 when none is free, +Inf when the rate is not positive. Absent until two passes at different times were seen.",
		}, []string{"pool"}),
		window: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ipkeeper_pool_exhaustion_window_seconds",
			Help: "Time in seconds the net rate behind ipkeeper_pool_exhaustion_seconds spans (up to an hour, shorter after a start).",
		}, []string{"pool"}),
	}
}

func (s poolSeries) collectors() []prometheus.Collector {
	return []prometheus.Collector{s.blocks, s.allocations, s.releases, s.netRate, s.exhaustion, s.window}
}

// forget drops every series of pool.
func (s poolSeries) forget(pool string) {
	for _, st := range []string{"claimed", "free"} {
		s.blocks.DeleteLabelValues(pool, st)
	}
	s.allocations.DeleteLabelValues(pool)
	s.releases.DeleteLabelValues(pool)
	s.forgetForecast(pool)
}

func (s poolSeries) forgetForecast(pool string) {
	s.netRate.DeleteLabelValues(pool)
	s.exhaustion.DeleteLabelValues(pool)
	s.window.DeleteLabelValues(pool)
}

// setLeading sets ipkeeper_leader; a replica that stops leading drops
// the series its passes set, which would otherwise stay at what it saw
// last beside the new leader's.
func (m *Metrics) setLeading(leading bool) {
	if leading {
		m.leader.Set(1)
		return
	}
	m.leader.Set(0)
	m.leakCandidates.Set(0)
	m.forgetPools(nil)
}

// poolHistory is what the pool metrics keep between passes: the owners of
// every block as the previous pass read them (the snapshot's own maps,
// which nothing changes), and each pool's window of addresses in use.
type poolHistory struct {
	owners  map[store.BlockRef]map[int]string
	windows map[string]*forecast.Window
}

// poolUse is what one pass saw of a pool.
type poolUse struct {
	usable, inUse, free       uint64  // addresses
	claimedBlocks, freeBlocks float64 // blocks
}

// poolMetrics sets the per-pool metrics from the pass's read of the pools
// and blocks at time now.
func (c *Controller) poolMetrics(snap allocator.Snapshot, now time.Time) {
	byPool := map[string][]ipam.Block{}
	for _, b := range snap.Blocks {
		byPool[b.Pool] = append(byPool[b.Pool], b)
	}
	allocs, releases := c.poolHist.observe(snap.Blocks)
	seen := map[string]bool{}
	for _, p := range snap.Pools {
		u := c.poolUse(p, byPool[p.Name])
		seen[p.Name] = true
		m := c.m
		m.poolAddresses.WithLabelValues(p.Name, "total").Set(float64(u.usable))
		m.poolAddresses.WithLabelValues(p.Name, "in_use").Set(float64(u.inUse))
		m.poolAddresses.WithLabelValues(p.Name, "free").Set(float64(u.free))
		m.pool.blocks.WithLabelValues(p.Name, "claimed").Set(u.claimedBlocks)
		m.pool.blocks.WithLabelValues(p.Name, "free").Set(u.freeBlocks)
		m.pool.allocations.WithLabelValues(p.Name).Add(float64(allocs[p.Name]))
		m.pool.releases.WithLabelValues(p.Name).Add(float64(releases[p.Name]))

		w := c.poolHist.windows[p.Name]
		if w == nil {
			w = &forecast.Window{}
			c.poolHist.windows[p.Name] = w
		}
		w.Add(now, float64(u.inUse))
		if e, ok := w.Estimate(float64(u.free)); ok {
			m.pool.exhaustion.WithLabelValues(p.Name).Set(e.Seconds)
			m.pool.netRate.WithLabelValues(p.Name).Set(e.Rate)
			m.pool.window.WithLabelValues(p.Name).Set(e.Span.Seconds())
		} else {
			m.pool.forgetForecast(p.Name)
		}
	}
	for name := range c.poolHist.windows {
		if !seen[name] {
			delete(c.poolHist.windows, name)
		}
	}
	if len(c.usable) > 4*len(snap.Pools)+16 {
		c.usable = map[string]uint64{}
	}
	c.m.forgetPools(seen)
}

// poolUse counts pool p's addresses and blocks from the blocks its nodes
// hold. Free addresses are the free ones of claimed blocks plus every
// usable one of unclaimed blocks.
func (c *Controller) poolUse(p ipam.Pool, blocks []ipam.Block) poolUse {
	def := fmt.Sprintf("%+v", p)
	usable, ok := c.usable[def]
	if !ok {
		usable = p.Usable()
		c.usable[def] = usable
	}
	u := poolUse{usable: usable, claimedBlocks: float64(len(blocks))}
	var permitted uint64
	for _, b := range blocks {
		u.inUse += uint64(b.InUse())
		u.free += uint64(b.FreeCount(p))
		permitted += uint64(p.PermittedIn(b.CIDR))
	}
	if usable > permitted {
		u.free += usable - permitted // unclaimed blocks are free as a whole
	}
	first, last := p.BlockSpan()
	u.freeBlocks = max(0, float64(last-first)+1-u.claimedBlocks)
	return u
}

// observe compares blocks with the previous pass's and counts, by pool,
// the addresses newly held by a handle and those no longer held by the
// handle that held them. The first call counts nothing.
func (h *poolHistory) observe(blocks []ipam.Block) (allocs, releases map[string]uint64) {
	if h.windows == nil {
		h.windows = map[string]*forecast.Window{}
	}
	allocs, releases = map[string]uint64{}, map[string]uint64{}
	cur := make(map[store.BlockRef]map[int]string, len(blocks))
	for _, b := range blocks {
		cur[store.BlockRef{Pool: b.Pool, CIDR: b.CIDR}] = b.Owners
	}
	if h.owners != nil {
		for ref, owners := range cur {
			prev := h.owners[ref]
			for ord, id := range owners {
				if was := prev[ord]; was != id {
					allocs[ref.Pool]++
					if was != "" {
						releases[ref.Pool]++
					}
				}
			}
			for ord := range prev {
				if owners[ord] == "" {
					releases[ref.Pool]++
				}
			}
		}
		for ref, prev := range h.owners {
			if _, ok := cur[ref]; !ok {
				releases[ref.Pool] += uint64(len(prev))
			}
		}
	}
	h.owners = cur
	return allocs, releases
}
