package controller

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the controller's Prometheus metrics.
type Metrics struct {
	// Registry holds every metric below plus the Go and process collectors.
	Registry *prometheus.Registry

	poolAddresses   *prometheus.GaugeVec
	leakCandidates  prometheus.Gauge
	releases        *prometheus.CounterVec
	releaseSkips    *prometheus.CounterVec
	blocksFreed     prometheus.Counter
	claimsAdopted   prometheus.Counter
	reconcile       prometheus.Histogram
	reconcileErrors prometheus.Counter
	leader          prometheus.Gauge
	kubeRequests    *prometheus.CounterVec

	pool        poolSeries
	nodeNetwork *nodeNetworkCollector

	pools map[string]bool // pools with ipkeeper_pool_addresses series
}

// NewMetrics registers the controller's metrics in a new registry.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		poolAddresses: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ipkeeper_pool_addresses",
			Help: "Addresses of each pool by state: total (the pool may hand out), in_use, free.",
		}, []string{"pool", "state"}),
		leakCandidates: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ipkeeper_leak_candidates",
			Help: "Allocations the last pass found leaked (released once seen leaked for the grace period).",
		}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipkeeper_releases_total",
			Help: "Leaked allocations released, by reason (pod-gone, pod-replaced, pod-finished, node-gone, old-sandbox).",
		}, []string{"reason"}),
		releaseSkips: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipkeeper_release_skips_total",
			Help: "Confirmed leaks not released because the handle changed since it was observed (changed) or the release failed (error).",
		}, []string{"why"}),
		blocksFreed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ipkeeper_node_blocks_freed_total",
			Help: "Empty blocks of deleted nodes freed: taken out of the node's object, their claims deleted.",
		}),
		claimsAdopted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ipkeeper_claims_adopted_total",
			Help: "Orphan claims (a block claimed by a node whose object did not hold it, as an ADD killed mid-way leaves) whose block was added to the node's object, empty.",
		}),
		reconcile: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ipkeeper_reconcile_duration_seconds",
			Help:    "Duration of reconcile passes.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
		reconcileErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ipkeeper_reconcile_errors_total",
			Help: "Reconcile passes that ended in an error.",
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ipkeeper_leader",
			Help: "1 while this replica holds the leader lease and reconciles, else 0.",
		}),
		kubeRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipkeeper_kube_requests_total",
			Help: "Requests this process sent to the Kubernetes API, by verb (list, watch, get, create, update, patch, delete) and resource.",
		}, []string{"verb", "resource"}),
		pool:        newPoolSeries(),
		nodeNetwork: newNodeNetworkCollector(),
	}
	m.Registry.MustRegister(append(m.pool.collectors(), m.nodeNetwork)...)
	m.Registry.MustRegister(m.poolAddresses, m.leakCandidates, m.releases, m.releaseSkips, m.blocksFreed,
		m.claimsAdopted, m.reconcile, m.reconcileErrors, m.leader, m.kubeRequests,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// forgetPools drops the per-pool series of pools not in current, and
// remembers current.
func (m *Metrics) forgetPools(current map[string]bool) {
	for p := range m.pools {
		if !current[p] {
			for _, s := range []string{"total", "in_use", "free"} {
				m.poolAddresses.DeleteLabelValues(p, s)
			}
			m.pool.forget(p)
		}
	}
	m.pools = current
}

// CountRequests wraps an HTTP transport so that every Kubernetes API
// request is counted in ipkeeper_kube_requests_total.
func (m *Metrics) CountRequests(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		verb, resource := classifyRequest(r)
		m.kubeRequests.WithLabelValues(verb, resource).Inc()
		return rt.RoundTrip(r)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// classifyRequest names a Kubernetes API request's verb and resource from
// its method and path: /api/v1/[namespaces/NS/]RESOURCE[/NAME[/SUB]] or
// /apis/GROUP/VERSION/[namespaces/NS/]RESOURCE[/NAME[/SUB]].
func classifyRequest(r *http.Request) (verb, resource string) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return strings.ToLower(r.Method), "other"
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	named := len(parts) >= 2
	resource = "other"
	if len(parts) > 0 && parts[0] != "" {
		resource = parts[0]
	}
	switch r.Method {
	case http.MethodGet:
		switch {
		case r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1":
			verb = "watch"
		case named:
			verb = "get"
		default:
			verb = "list"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
	default:
		verb = strings.ToLower(r.Method)
	}
	return verb, resource
}
