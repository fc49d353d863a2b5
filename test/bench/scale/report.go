package main

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// parseMetrics reads Prometheus text exposition: every sample's value by
// its series as printed (name plus labels); comments and lines that do
// not parse are skipped.
func parseMetrics(b []byte) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || l[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			continue
		}
		// A sample may carry a timestamp after its value.
		series, val := l[:i], l[i+1:]
		if j := strings.LastIndexByte(series, ' '); j >= 0 && !strings.HasSuffix(series, "}") {
			series, val = series[:j], series[j+1:]
		}
		if v, err := strconv.ParseFloat(val, 64); err == nil {
			out[series] = v
		}
	}
	return out
}

// sumSeries adds the samples of metric name over all its labels.
func sumSeries(m map[string]float64, name string) float64 {
	var n float64
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			n += v
		}
	}
	return n
}

// procStatusKB is the value in kB of field (VmRSS, VmHWM) of a
// /proc/PID/status text, 0 when absent.
func procStatusKB(status, field string) int64 {
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// etcdMetrics are the API server's etcd's counters: it runs in this
// process (internal/kubetest), so its metrics are in the default registry.
func etcdMetrics() map[string]float64 {
	out := map[string]float64{}
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		return out
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.Counter != nil:
				out[mf.GetName()] += m.Counter.GetValue()
			case m.Gauge != nil:
				out[mf.GetName()] += m.Gauge.GetValue()
			}
		}
	}
	return out
}

// goal is one printed figure with its goal.
type goal struct {
	what, value, target string
	met                 bool
	known               bool // false: no verdict (no goal, or nothing measured)
}

func (g goal) String() string {
	verdict := "missed"
	switch {
	case !g.known:
		verdict = "-"
	case g.met:
		verdict = "met"
	}
	return fmt.Sprintf("  %-44s %-22s goal %-22s %s", g.what, g.value, g.target, verdict)
}

// perMinute scales v measured over d to a minute.
func perMinute(v float64, d time.Duration) float64 { return v / d.Minutes() }

// mib formats bytes in MiB.
func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }

// ms formats d in milliseconds.
func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
