package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// controller is the ipkeeper-controller process under measurement.
type controller struct {
	cmd     *exec.Cmd
	metrics string
	logPath string
	logFile *os.File
	exited  chan struct{}
}

// startController runs the binary on the datastore env names (IPKEEPER_*
// variables) with the admin's kubeconfig, no leader election and the
// bench's grace and resync; its log goes to a file in dir.
func startController(ctx context.Context, bin, dir, kubeconfig string, env []string) *controller {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	args := []string{"--kubeconfig", kubeconfig, "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port),
		"--leader-elect=false", "--leak-grace", flagGrace.String(), "--resync", flagResync.String()}
	if help, _ := exec.Command(bin, "--help").CombinedOutput(); strings.Contains(string(help), "--map-addr") {
		args = append(args, "--map-addr=") // no address map: it would read the datastore too
	}
	c := &controller{metrics: fmt.Sprintf("http://127.0.0.1:%d", port), logPath: dir + "/controller.log", exited: make(chan struct{})}
	if c.logFile, err = os.Create(c.logPath); err != nil {
		log.Fatal(err)
	}
	c.cmd = exec.CommandContext(ctx, bin, args...)
	c.cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
	c.cmd.Stderr = c.logFile
	if err := c.cmd.Start(); err != nil {
		log.Fatal(err)
	}
	go func() { _ = c.cmd.Wait(); close(c.exited) }()
	return c
}

// stop ends the controller with SIGTERM (SIGKILL after 20s).
func (c *controller) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(20 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
	c.logFile.Close()
}

func (c *controller) fail(format string, args ...any) {
	b, _ := os.ReadFile(c.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	log.Fatalf("%s\ncontroller log (end):\n%s", fmt.Sprintf(format, args...), b)
}

// waitReady waits until /readyz answers 200.
func (c *controller) waitReady(ctx context.Context, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for {
		resp, err := http.Get(c.metrics + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-c.exited:
			c.fail("the controller exited")
		case <-ctx.Done():
			c.fail("%v", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.fail("the controller is not ready after %v", limit)
		}
	}
}

// scrape returns every sample of /metrics by its series (name plus labels
// as printed).
func (c *controller) scrape() (map[string]float64, error) {
	resp, err := http.Get(c.metrics + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || l[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err == nil {
			out[l[:i]] = v
		}
	}
	return out, sc.Err()
}

func (c *controller) mustScrape() map[string]float64 {
	m, err := c.scrape()
	if err != nil {
		c.fail("scrape: %v", err)
	}
	return m
}

// value returns one series' value (0 when absent).
func (c *controller) value(series string) float64 { return c.mustScrape()[series] }

// waitValue waits until cond holds for a series.
func (c *controller) waitValue(ctx context.Context, limit time.Duration, series string, cond func(float64) bool) {
	deadline := time.Now().Add(limit)
	for !cond(c.value(series)) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			c.fail("%s did not reach the wanted value within %v", series, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// requests returns ipkeeper_kube_requests_total by "verb resource".
func (c *controller) requests() map[string]float64 {
	out := map[string]float64{}
	for k, v := range c.mustScrape() {
		if rest, ok := strings.CutPrefix(k, "ipkeeper_kube_requests_total{"); ok {
			out[requestKey(strings.TrimSuffix(rest, "}"))] += v
		}
	}
	return out
}

// releases sums ipkeeper_releases_total over its reasons.
func releases(m map[string]float64) float64 {
	var n float64
	for k, v := range m {
		if strings.HasPrefix(k, "ipkeeper_releases_total{") {
			n += v
		}
	}
	return n
}

// waitReleases waits until the controller has released n allocations
// (at most -timeout after since) and returns the times of its first and
// last release, from its log.
func (c *controller) waitReleases(ctx context.Context, n int, since time.Time) (first, last time.Time) {
	deadline := since.Add(*flagTimeout)
	for {
		got := releases(c.mustScrape())
		if int(got) >= n {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			c.fail("%v of %d leaked allocations released after %v", got, n, *flagTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	f, err := os.Open(c.logPath)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	count := 0
	for sc.Scan() {
		if !strings.Contains(sc.Text(), `"released leaked address"`) {
			continue
		}
		var rec struct {
			Time time.Time `json:"time"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			continue
		}
		if first.IsZero() {
			first = rec.Time
		}
		last = rec.Time
		count++
	}
	if count < n {
		// The metric counts a release just before its log line.
		time.Sleep(200 * time.Millisecond)
		return c.waitReleases(ctx, n, since)
	}
	return first, last
}

// lastPass is the duration of the controller's last reconcile pass,
// bounded by the histogram bucket it fell in.
func (c *controller) lastPass() string {
	m := c.mustScrape()
	type bucket struct {
		le float64
		n  float64
	}
	var bs []bucket
	for k, v := range m {
		if rest, ok := strings.CutPrefix(k, `ipkeeper_reconcile_duration_seconds_bucket{le="`); ok {
			le, err := strconv.ParseFloat(strings.TrimSuffix(rest, `"}`), 64)
			if err == nil {
				bs = append(bs, bucket{le, v})
			}
		}
	}
	count := m["ipkeeper_reconcile_duration_seconds_count"]
	best := "?"
	bestLE := 0.0
	for _, b := range bs {
		// The smallest bucket holding every pass bounds the longest one.
		if b.n >= count && (best == "?" || b.le < bestLE) {
			best, bestLE = fmt.Sprintf("<= %gs (longest pass)", b.le), b.le
		}
	}
	return best
}

// cpu is the controller's user plus system CPU time (/proc/PID/stat).
func (c *controller) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.cmd.Process.Pid))
	if err != nil {
		log.Fatal(err)
	}
	// The command name may hold spaces: fields count after its ')'.
	s := string(b)
	fs := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	utime, _ := strconv.ParseInt(fs[11], 10, 64)
	stime, _ := strconv.ParseInt(fs[12], 10, 64)
	const userHZ = 100 // the unit of /proc/PID/stat times on Linux
	return time.Duration(utime+stime) * time.Second / userHZ
}

// memory returns VmHWM and VmRSS of the controller in KiB.
func (c *controller) memory() (hwm, rss int64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmHWM":
			hwm = n
		case "VmRSS":
			rss = n
		}
	}
	return hwm, rss
}
