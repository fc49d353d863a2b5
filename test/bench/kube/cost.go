package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/kubetest"
)

// costs is what a phase's calls cost beyond their latency: the CPU time of
// the plugin processes (every child reaped, grandchildren such as
// ipkeeper-kube included), of the ipkeeper-agent processes, of the
// kube-apiserver process, of this process (the API server's embedded
// etcd, and the harness that starts the calls), and the API requests the
// server served.
type costs struct {
	plugin, agents, apiserver, self time.Duration
	// byKind counts requests by verb and resource ("POST ipamblocks").
	byKind map[string]float64
}

func (c costs) sub(o costs) costs {
	d := costs{plugin: c.plugin - o.plugin, agents: c.agents - o.agents, apiserver: c.apiserver - o.apiserver,
		self: c.self - o.self, byKind: map[string]float64{}}
	for k, v := range c.byKind {
		if v -= o.byKind[k]; v != 0 {
			d.byKind[k] = v
		}
	}
	return d
}

// requests is the number of resource requests the API server served.
func (c costs) requests() float64 {
	var n float64
	for _, v := range c.byKind {
		n += v
	}
	return n
}

// total is all the CPU time the phase cost this machine.
func (c costs) total() time.Duration { return c.plugin + c.agents + c.apiserver + c.self }

// meter takes a costs snapshot; nil measures nothing.
var meter func() costs

// newMeter measures the plugin processes through RUSAGE_CHILDREN (the
// kube-apiserver child is not reaped until the end, so it is not in it),
// the kube-apiserver through /proc/PID/stat, and requests through the
// server's apiserver_request_total (resource requests only: the bench's
// own /metrics reads are not counted).
func newMeter(srv *kubetest.Server) (func() costs, error) {
	if _, err := srv.CPU(); err != nil {
		return nil, err
	}
	return func() costs {
		var ru, self syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru)
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
		c := costs{plugin: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), self: time.Duration(self.Utime.Nano() + self.Stime.Nano())}
		c.apiserver, _ = srv.CPU()
		for _, a := range childrenNamed("ipkeeper-agent") {
			d, _ := kubetest.ProcessCPU(a)
			c.agents += d
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if b, err := srv.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx); err == nil {
			c.byKind = resourceRequests(b)
		}
		return c
	}, nil
}

// childrenNamed lists this process's children whose command is name.
func childrenNamed(name string) []int {
	var pids []int
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, st := range stats {
		b, err := os.ReadFile(st)
		if err != nil {
			continue
		}
		open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(string(b[end+1:]))
		if string(b[open+1:end]) == name && len(f) > 1 && f[1] == strconv.Itoa(os.Getpid()) {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b[:open]))); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// resourceRequests counts apiserver_request_total by verb and resource,
// over series with a non-empty resource label.
func resourceRequests(metrics []byte) map[string]float64 {
	byKind := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(metrics))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		resource := metricLabel(line, "resource")
		if !strings.HasPrefix(line, "apiserver_request_total{") || resource == "" {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			byKind[metricLabel(line, "verb")+" "+resource] += v
		}
	}
	return byKind
}

// metricLabel is the value of label name in a Prometheus text line.
func metricLabel(line, name string) string {
	for _, open := range []string{"{", ","} {
		if _, rest, ok := strings.Cut(line, open+name+`="`); ok {
			v, _, _ := strings.Cut(rest, `"`)
			return v
		}
	}
	return ""
}
