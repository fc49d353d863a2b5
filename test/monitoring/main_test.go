// Package monitoring tests deploy/monitoring: the PrometheusRule's alerts
// with promtool on synthetic series, and that the rules and the Grafana
// dashboard name only metrics ipkeeper-controller exports.
package monitoring

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ipkeeper/ipkeeper/internal/controller"
)

// monitoringDir is deploy/monitoring, from this package's directory.
const monitoringDir = "../../deploy/monitoring"

func readMonitoring(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(monitoringDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// exportedNames are the names of the series ipkeeper-controller's
// registry exports, read from the code: every metric it describes, with
// _bucket, _sum and _count for its histograms and summaries.
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	m := controller.NewMetrics()
	ch := make(chan *prometheus.Desc)
	go func() { m.Registry.Describe(ch); close(ch) }()
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	for d := range ch {
		if s := fq.FindStringSubmatch(d.String()); s != nil {
			names[s[1]] = true
		}
	}
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetType() == dto.MetricType_HISTOGRAM || mf.GetType() == dto.MetricType_SUMMARY {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[mf.GetName()+s] = true
			}
		}
	}
	if !names["ipkeeper_leader"] || !names["ipkeeper_pool_exhaustion_seconds"] {
		t.Fatalf("the controller's registry describes no ipkeeper_leader or ipkeeper_pool_exhaustion_seconds: %v", slices.Sorted(mapKeys(names)))
	}
	return names
}

// ipkeeperMetric matches the names of ipkeeper's series in an expression.
var ipkeeperMetric = regexp.MustCompile(`\bipkeeper_[a-zA-Z0-9_]+`)

// unknownMetrics returns the ipkeeper_ names in expr the controller does
// not export, and how many ipkeeper_ names it uses.
func unknownMetrics(expr string, exported map[string]bool) (unknown []string, used int) {
	for _, n := range ipkeeperMetric.FindAllString(expr, -1) {
		used++
		if !exported[n] {
			unknown = append(unknown, n)
		}
	}
	return unknown, used
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
