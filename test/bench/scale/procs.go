package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/podinfo"
)

// proc is a process the bench started, its log in a file.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	logFile *os.File
	exited  chan struct{}
}

func startProc(name, logPath string, env []string, bin string, args ...string) (*proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // gone with the bench
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, logFile: f, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	return p, nil
}

// stop ends the process with SIGTERM (SIGKILL after 10s), by its PID.
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	p.logFile.Close()
}

// logTail is the end of the process's log, for error messages.
func (p *proc) logTail() string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// cpu is the process's user plus system CPU time so far.
func (p *proc) cpu() time.Duration {
	d, _ := kubetest.ProcessCPU(p.cmd.Process.Pid)
	return d
}

// memory returns the process's VmRSS and VmHWM in bytes.
func (p *proc) memory() (rss, hwm int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, 0
	}
	return procStatusKB(string(b), "VmRSS") * 1024, procStatusKB(string(b), "VmHWM") * 1024
}

// controller is ipkeeper-controller with the address map it serves.
type controller struct {
	*proc
	metrics string // http://host:port of /metrics and /readyz
	mapURL  string // http://host:port/ of the address map
}

// startController runs the controller binary on the kubernetes datastore
// (partition prefix) with kubeconfig, no leader election, the bench's
// grace and resync, and the address map on a loopback port.
func startController(bin, dir, kubeconfig, prefix string, grace, resync time.Duration) (*controller, error) {
	mport, err := freePort()
	if err != nil {
		return nil, err
	}
	uport, err := freePort()
	if err != nil {
		return nil, err
	}
	c := &controller{metrics: fmt.Sprintf("http://127.0.0.1:%d", mport), mapURL: fmt.Sprintf("http://127.0.0.1:%d/", uport)}
	c.proc, err = startProc("ipkeeper-controller", filepath.Join(dir, "controller.log"),
		[]string{"IPKEEPER_DATASTORE=kubernetes", "IPKEEPER_DATASTORE_PREFIX=" + prefix}, bin,
		"--kubeconfig", kubeconfig, "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", mport),
		"--map-addr", fmt.Sprintf("127.0.0.1:%d", uport), "--leader-elect=false", "--profiling",
		"--leak-grace", grace.String(), "--resync", resync.String())
	return c, err
}

// saveHeap writes the controller's heap profile (its --profiling) to
// path.
func (c *controller) saveHeap(path string) error {
	resp, err := http.Get(c.metrics + "/debug/pprof/heap")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("heap profile: %s", resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// waitReady waits until /readyz answers 200.
func (c *controller) waitReady(ctx context.Context, limit time.Duration) error {
	return poll(ctx, limit, c.exited, func() bool {
		resp, err := http.Get(c.metrics + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// mapLoaded waits until the map's overview (/api/pools, what the page
// fetches first) says loaded.
func (c *controller) mapLoaded(ctx context.Context, limit time.Duration) error {
	return poll(ctx, limit, c.exited, func() bool {
		var ov struct {
			Loaded bool `json:"loaded"`
		}
		return getJSON(c.mapURL+"api/pools", &ov) == nil && ov.Loaded
	})
}

// scrape returns the controller's /metrics samples by series.
func (c *controller) scrape() map[string]float64 {
	resp, err := http.Get(c.metrics + "/metrics")
	if err != nil {
		return map[string]float64{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return parseMetrics(b)
}

// releases returns, from the controller's log, when each handle was
// released (the first time), by "namespace/pod" when the record names a
// pod, else by handle ID.
func (c *controller) releases() map[string]time.Time {
	out := map[string]time.Time{}
	f, err := os.Open(c.logPath)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if !strings.Contains(sc.Text(), `"released leaked address"`) {
			continue
		}
		var rec struct {
			Time   time.Time `json:"time"`
			Pod    string    `json:"pod"`
			Handle string    `json:"handle"`
			Node   string    `json:"node"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) != nil {
			continue
		}
		for _, k := range []string{rec.Pod, rec.Handle, "node:" + rec.Node} {
			if _, seen := out[k]; !seen && k != "" {
				out[k] = rec.Time
			}
		}
		// The node's last release.
		out["last:"+rec.Node] = rec.Time
	}
	return out
}

// agents are ipkeeper-agent processes, one per measured node.
type agents struct {
	procs   []*proc
	sockets []string
}

// startAgents starts an agent per node with that node's kubeconfig.
func startAgents(ctx context.Context, bin, dir string, nodes, kubeconfigs []string) (*agents, error) {
	a := &agents{}
	for i, n := range nodes {
		sock := filepath.Join(dir, "agent-"+n, "agent.sock")
		if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
			a.stop()
			return nil, err
		}
		p, err := startProc("ipkeeper-agent", filepath.Join(dir, "agent-"+n+".log"), nil, bin,
			"--kubeconfig="+kubeconfigs[i], "--node-name="+n, "--socket="+sock, "--log-level=warn")
		if err != nil {
			a.stop()
			return nil, err
		}
		a.procs = append(a.procs, p)
		a.sockets = append(a.sockets, sock)
	}
	for i, sock := range a.sockets {
		cl := podinfo.NewAgentClient(sock)
		err := poll(ctx, 2*time.Minute, a.procs[i].exited, func() bool {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			return cl.Ready(rctx) == nil
		})
		if err != nil {
			tail := a.procs[i].logTail()
			a.stop()
			return nil, fmt.Errorf("ipkeeper-agent of %s not ready: %w\n%s", nodes[i], err, tail)
		}
	}
	return a, nil
}

func (a *agents) stop() {
	for _, p := range a.procs {
		p.stop()
	}
}

// peakRSS is the largest VmHWM among the agents, in bytes.
func (a *agents) peakRSS() int64 {
	var peak int64
	for _, p := range a.procs {
		_, hwm := p.memory()
		peak = max(peak, hwm)
	}
	return peak
}

// errExited: the process waited on exited.
var errExited = errors.New("the process exited")

// poll calls ok every 50ms until it holds, the process exits, ctx ends or
// limit passes.
func poll(ctx context.Context, limit time.Duration, exited <-chan struct{}, ok func() bool) error {
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", limit)
		}
		select {
		case <-exited:
			return errExited
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// serviceAccountKubeconfig writes to dst a kubeconfig for the
// ServiceAccount namespace/name (a TokenRequest token), whose server is
// server; the API server's RBAC decides what it may do.
func serviceAccountKubeconfig(ctx context.Context, srv *kubetest.Server, namespace, name, dst string, via *meterProxy) error {
	secs := int64(24 * 3600)
	tr, err := srv.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token for %s/%s: %w", namespace, name, err)
	}
	c, err := clientcmd.LoadFromFile(srv.AdminKubeconfig)
	if err != nil {
		return err
	}
	for _, ai := range c.AuthInfos {
		ai.Token = tr.Status.Token
	}
	via.point(c)
	return clientcmd.WriteToFile(*c, dst)
}
