package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipkeeper/ipkeeper/internal/agent/agenttest"
	"github.com/ipkeeper/ipkeeper/test/bench/latency"
	"github.com/ipkeeper/ipkeeper/test/e2e/cnirun"
)

// BenchmarkPodAwareADD times plugin ADDs as processes, interleaved in one
// run on one local store: a plain ADD (no kubernetes key); pod-aware ADDs
// in direct mode (pod, namespace and node read from a real kube-apiserver
// with the kubeconfig, concurrently) of a pod without annotations and of
// one whose pod names its pool in ipkeeper.io/pools; and the same two in
// agent mode (asked of a running ipkeeper-agent over its unix socket, no
// kubeconfig). It prints p50 and p99 of each and each mode's extra over
// plain. Run with
//
//	go test -run x -bench PodAwareADD -benchtime 200x ./test/e2e/
func BenchmarkPodAwareADD(b *testing.B) {
	if buildErr != nil || ctlBuildErr != nil || agentBuildErr != nil {
		b.Fatal(buildErr, ctlBuildErr, agentBuildErr)
	}
	f := newKubeFixture(b)
	agent := agenttest.Start(b, agentBin, f.kc, "node-a", true)
	viaAgent := map[string]any{"kubernetes": map[string]any{"agentSocket": agent.Socket}}
	kinds := []struct {
		name string
		ipam map[string]any
		ann  map[string]string // nil: no pod (plain)
	}{
		{"plain", map[string]any{"kubernetes": nil}, nil},
		{"pod-aware", nil, map[string]string{}},
		{"pod-aware+annotation", nil, map[string]string{"ipkeeper.io/pools": `["bench4"]`}},
		{"agent", viaAgent, map[string]string{}},
		{"agent+annotation", viaAgent, map[string]string{"ipkeeper.io/pools": `["bench4"]`}},
	}
	range16 := map[string]any{"ranges": [][]map[string]any{{{"subnet": "10.80.0.0/16"}}}}
	ctl(b, writeTemp(b, f.podConf(b, "node-a", range16)), "pool", "add", "bench4", "--cidr", "10.81.0.0/16")
	stdin := make([][]byte, len(kinds))
	for k, kind := range kinds {
		stdin[k] = f.podConf(b, "node-a", merge(range16, kind.ipam))
	}
	n := b.N
	pods := make([][]*corev1.Pod, len(kinds))
	for k, kind := range kinds {
		if kind.ann == nil {
			pods[k] = make([]*corev1.Pod, n)
			continue
		}
		for i := range n {
			pods[k] = append(pods[k], f.pod(b, "ns-plain", fmt.Sprintf("bench-%d-%d", k, i), "node-a", kind.ann))
		}
	}
	durs := make([][]time.Duration, len(kinds))
	b.ResetTimer()
	for i := range n {
		for k := range kinds {
			out, err := cnirun.Run(ctxT(b), ipkeeperBin, podCall(fmt.Sprintf("bench-%d-%d", k, i), pods[k][i], stdin[k]))
			if err != nil || out.ExitCode != 0 {
				b.Fatalf("%s ADD %d: %v\n%v", kinds[k].name, i, err, out)
			}
			durs[k] = append(durs[k], out.Duration)
		}
	}
	b.StopTimer()
	pct := func(d []time.Duration, p float64) float64 {
		return float64(latency.Percentile(d, p).Microseconds()) / 1000
	}
	for k, kind := range kinds {
		b.ReportMetric(pct(durs[k], 50), kind.name+"-p50-ms")
		b.ReportMetric(pct(durs[k], 99), kind.name+"-p99-ms")
		b.Logf("%-22s p50 %6.2f ms  p99 %6.2f ms  (%d ADDs)", kind.name, pct(durs[k], 50), pct(durs[k], 99), n)
	}
	for k := 1; k < len(kinds); k++ {
		over := pct(durs[k], 50) - pct(durs[0], 50)
		b.ReportMetric(over, kinds[k].name+"-over-plain-p50-ms")
		b.Logf("%-22s p50 - plain p50: %+.2f ms", kinds[k].name, over)
	}
	if strings.Contains(agent.Log(), "not in the cache") {
		b.Logf("some agent lookups were cache misses (read from the API server): %d", strings.Count(agent.Log(), "not in the cache"))
	}
}
