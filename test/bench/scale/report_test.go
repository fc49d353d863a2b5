package main

import (
	"testing"
	"time"
)

func TestParseMetrics(t *testing.T) {
	text := []byte(`# HELP ipkeeper_releases_total Releases.
# TYPE ipkeeper_releases_total counter
ipkeeper_releases_total{reason="pod-gone"} 3
ipkeeper_releases_total{reason="node-gone"} 220
ipkeeper_reconcile_duration_seconds_count 7
go_goroutines 41 1700000000000
broken line
ipkeeper_label_with_space{detail="a b"} 2.5
`)
	m := parseMetrics(text)
	for series, want := range map[string]float64{
		`ipkeeper_releases_total{reason="pod-gone"}`:  3,
		`ipkeeper_releases_total{reason="node-gone"}`: 220,
		`ipkeeper_reconcile_duration_seconds_count`:   7,
		`go_goroutines`: 41,
		`ipkeeper_label_with_space{detail="a b"}`: 2.5,
	} {
		if got, ok := m[series]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
	if len(m) != 5 {
		t.Errorf("parsed %d series, want 5: %v", len(m), m)
	}
	if got := sumSeries(m, "ipkeeper_releases_total"); got != 223 {
		t.Errorf("sum of ipkeeper_releases_total = %v, want 223", got)
	}
}

func TestRequestKind(t *testing.T) {
	for _, c := range []struct{ method, path, watch, want string }{
		{"GET", "/api/v1/pods", "", "LIST pods"},
		{"GET", "/api/v1/pods", "true", "WATCH pods"},
		{"GET", "/api/v1/namespaces/scale/pods/p-1", "", "GET pods"},
		{"GET", "/api/v1/namespaces/scale/pods", "", "LIST pods"},
		{"PUT", "/apis/ipkeeper.io/v1alpha1/ipamnodes/scale.node-00001", "", "PUT ipamnodes"},
		{"GET", "/apis/ipkeeper.io/v1alpha1/ipamblocks", "1", "WATCH ipamblocks"},
		{"PATCH", "/api/v1/namespaces/scale/pods/p-1/status", "", "PATCH pods/status"},
		{"POST", "/apis/authentication.k8s.io/v1/tokenreviews", "", "POST tokenreviews"},
		{"GET", "/version", "", "GET /version"},
	} {
		if got := requestKind(c.method, c.path, c.watch); got != c.want {
			t.Errorf("requestKind(%s %s watch=%q) = %q, want %q", c.method, c.path, c.watch, got, c.want)
		}
	}
}

func TestProcStatusKB(t *testing.T) {
	status := "Name:\tipkeeper-contr\nVmHWM:\t  51200 kB\nVmRSS:\t   45264 kB\nThreads:\t9\n"
	if got := procStatusKB(status, "VmHWM"); got != 51200 {
		t.Errorf("VmHWM = %d, want 51200", got)
	}
	if got := procStatusKB(status, "VmRSS"); got != 45264 {
		t.Errorf("VmRSS = %d, want 45264", got)
	}
	if got := procStatusKB(status, "VmSwap"); got != 0 {
		t.Errorf("VmSwap = %d, want 0", got)
	}
}

func TestTrafficSub(t *testing.T) {
	a := traffic{bytesIn: 10, bytesOut: 100, byKind: map[string]int64{"LIST pods": 1, "PUT ipamnodes": 2},
		bytesByKind: map[string]int64{"WATCH pods": 50, "PUT ipamnodes": 60}}
	b := traffic{bytesIn: 15, bytesOut: 400, byKind: map[string]int64{"LIST pods": 1, "PUT ipamnodes": 5, "GET ipamnodes": 1},
		bytesByKind: map[string]int64{"WATCH pods": 250, "PUT ipamnodes": 60, "GET ipamnodes": 105}}
	d := b.sub(a)
	if d.bytesIn != 5 || d.bytesOut != 300 || d.requests() != 4 || d.byKind["PUT ipamnodes"] != 3 || d.byKind["GET ipamnodes"] != 1 {
		t.Errorf("sub = %+v", d)
	}
	if d.bytesByKind["WATCH pods"] != 200 || d.bytesByKind["GET ipamnodes"] != 105 || len(d.bytesByKind) != 2 {
		t.Errorf("sub's bytes by kind = %v, want WATCH pods 200 and GET ipamnodes 105", d.bytesByKind)
	}
	if _, ok := d.byKind["LIST pods"]; ok {
		t.Errorf("an unchanged kind is listed: %v", d.byKind)
	}
	if got := perMinute(30, 30*time.Second); got != 60 {
		t.Errorf("perMinute(30, 30s) = %v, want 60", got)
	}
}
