package controller

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// proc is a running ipkeeper-controller.
type proc struct {
	t       *testing.T
	name    string
	cmd     *exec.Cmd
	metrics string // http://127.0.0.1:PORT
	mu      sync.Mutex
	lines   []string
	newLine chan struct{}
	done    chan struct{}
}

// controllerArgs are the flags every test passes: the ServiceAccount's
// kubeconfig, a free metrics port.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startController runs ipkeeper-controller with the ServiceAccount's
// kubeconfig, the given environment (the datastore) and flags, and stops
// it (SIGTERM, then SIGKILL) when the test ends. Its log goes to the test
// log as well.
func startController(t *testing.T, name string, env []string, flags ...string) *proc {
	t.Helper()
	port := freePort(t)
	args := append([]string{"--kubeconfig", saKubeconfig, "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port)}, noMapFlags()...)
	args = append(args, flags...)
	cmd := exec.Command(controllerBin, args...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, name: name, cmd: cmd, metrics: fmt.Sprintf("http://127.0.0.1:%d", port),
		newLine: make(chan struct{}, 1), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go p.read(stderr)
	t.Cleanup(p.stop)
	for i := 0; ; i++ {
		if code, _ := p.get("/healthz"); code == http.StatusOK {
			break
		}
		if i >= 600 {
			t.Fatalf("%s does not serve /healthz", name)
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited", name)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return p
}

var (
	mapFlagOnce sync.Once
	mapFlag     []string
)

// noMapFlags turns the address map off when the binary serves one (on a
// fixed default port, which replicas side by side would both want).
func noMapFlags() []string {
	mapFlagOnce.Do(func() {
		out, _ := exec.Command(controllerBin, "--help").CombinedOutput()
		if strings.Contains(string(out), "--map-addr") {
			mapFlag = []string{"--map-addr="}
		}
	})
	return mapFlag
}

func (p *proc) read(r io.Reader) {
	defer close(p.done)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		p.mu.Lock()
		p.lines = append(p.lines, sc.Text())
		p.mu.Unlock()
		select {
		case p.newLine <- struct{}{}:
		default:
		}
	}
}

// stop ends the process with SIGTERM (it releases its lease), or SIGKILL
// when it does not exit in time, and logs its output.
func (p *proc) stop() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		exited := make(chan struct{})
		go func() { p.wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-exited
		}
	}
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	p.t.Logf("%s (pid %d) log:\n%s", p.name, p.cmd.Process.Pid, strings.Join(p.lines, "\n"))
}

// kill9 kills the process with SIGKILL and waits for it; every line it
// wrote has been read when kill9 returns.
func (p *proc) kill9() {
	_ = p.cmd.Process.Kill()
	p.wait()
}

// wait waits until the log pipe has been read to its end (the process
// exited), then reaps the process: Wait closes the pipe, so reading must
// be over first.
func (p *proc) wait() {
	<-p.done
	_ = p.cmd.Wait()
}

// sigstop and sigcont pause and resume the process.
func (p *proc) sigstop() { _ = p.cmd.Process.Signal(syscall.SIGSTOP) }

func (p *proc) sigcont() { _ = p.cmd.Process.Signal(syscall.SIGCONT) }

// lineCount is how many log lines have been read.
func (p *proc) lineCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.lines)
}

// linesSince returns the log lines read after the first n.
func (p *proc) linesSince(n int) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines[min(n, len(p.lines)):]...)
}

// logCount counts log lines containing every one of subs.
func (p *proc) logCount(subs ...string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, l := range p.lines {
		ok := true
		for _, s := range subs {
			ok = ok && strings.Contains(l, s)
		}
		if ok {
			n++
		}
	}
	return n
}

// waitLog waits (at most limit) until n log lines contain every one of
// subs.
func (p *proc) waitLog(limit time.Duration, n int, subs ...string) {
	p.t.Helper()
	deadline := time.After(limit)
	for p.logCount(subs...) < n {
		select {
		case <-p.newLine:
		case <-p.done:
			if p.logCount(subs...) < n {
				p.t.Fatalf("%s exited before logging %d× %q", p.name, n, subs)
			}
		case <-deadline:
			p.t.Fatalf("%s did not log %d× %q within %v", p.name, n, subs, limit)
		}
	}
}

// scrape returns the metrics page.
func (p *proc) scrape() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.metrics+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// metric returns the value of the sample whose line starts with series
// (name plus labels as printed, e.g. `ipkeeper_releases_total{reason="pod-gone"}`),
// 0 when absent.
func (p *proc) metric(series string) float64 {
	p.t.Helper()
	page, err := p.scrape()
	if err != nil {
		p.t.Fatalf("scrape %s: %v", p.name, err)
	}
	return metricIn(page, series)
}

func metricIn(page, series string) float64 {
	for _, l := range strings.Split(page, "\n") {
		if rest, ok := strings.CutPrefix(l, series+" "); ok {
			v, _ := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v
		}
	}
	return 0
}

// waitMetric waits (at most limit) until cond holds for the series' value.
func (p *proc) waitMetric(limit time.Duration, series string, cond func(float64) bool) float64 {
	p.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		page, err := p.scrape()
		if err == nil {
			if v := metricIn(page, series); cond(v) {
				return v
			}
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s: %s did not reach the wanted value within %v (last scrape error %v)", p.name, series, limit, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// get fetches a path of the metrics server and returns the status code.
func (p *proc) get(path string) (int, string) {
	resp, err := http.Get(p.metrics + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = io.Copy(&b, resp.Body)
	return resp.StatusCode, b.String()
}
