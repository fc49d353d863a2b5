package etcdfault

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
)

// EtcdVersion is the etcd release the fault tests build (see etcdserver/go.mod).
const EtcdVersion = "v3.6.6"

// BuildEtcd builds etcd from the etcdserver module into a cache directory
// keyed by version and returns the binary's path; later calls reuse it.
func BuildEtcd(root string) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	bin := filepath.Join(cache, "ipkeeper-test", "etcd-"+EtcdVersion)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	tmp := bin + fmt.Sprintf(".tmp%d", os.Getpid())
	cmd := exec.Command("go", "build", "-o", tmp, ".")
	cmd.Dir = filepath.Join(root, "test", "etcdfault", "etcdserver")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build etcd: %v\n%s", err, out)
	}
	return bin, os.Rename(tmp, bin)
}

// Member is one etcd process of a Cluster.
type Member struct {
	Name, ClientURL, PeerURL, Dir string
	cmd                           *exec.Cmd
	log                           *os.File
}

// Cluster is a multi-member etcd cluster of separate processes on loopback.
type Cluster struct {
	bin     string
	initial string
	Members []*Member
	mu      sync.Mutex
}

// StartCluster starts n members under dir and waits until every one
// answers.
func StartCluster(ctx context.Context, bin, dir string, n int) (*Cluster, error) {
	c := &Cluster{bin: bin}
	var peers []string
	for i := range n {
		cp, err := etcdtest.FreePort()
		if err != nil {
			return nil, err
		}
		pp, err := etcdtest.FreePort()
		if err != nil {
			return nil, err
		}
		m := &Member{Name: fmt.Sprintf("m%d", i), ClientURL: fmt.Sprintf("http://127.0.0.1:%d", cp),
			PeerURL: fmt.Sprintf("http://127.0.0.1:%d", pp), Dir: filepath.Join(dir, fmt.Sprintf("m%d", i))}
		c.Members = append(c.Members, m)
		peers = append(peers, m.Name+"="+m.PeerURL)
	}
	c.initial = strings.Join(peers, ",")
	for _, m := range c.Members {
		if err := c.Start(m); err != nil {
			c.Kill()
			return nil, err
		}
	}
	for _, m := range c.Members {
		if err := waitHealthy(ctx, m, 30*time.Second); err != nil {
			c.Kill()
			return nil, err
		}
	}
	return c, nil
}

// Endpoints returns every member's client URL.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.ClientURL)
	}
	return eps
}

// Start (re)starts a member's process on its data directory.
func (c *Cluster) Start(m *Member) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := os.MkdirAll(m.Dir, 0o700); err != nil {
		return err
	}
	logf, err := os.OpenFile(m.Dir+".log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.bin, "--name", m.Name, "--data-dir", m.Dir,
		"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
		"--listen-peer-urls", m.PeerURL, "--initial-advertise-peer-urls", m.PeerURL,
		"--initial-cluster", c.initial, "--initial-cluster-state", "new",
		"--initial-cluster-token", "ipkeeper-fault", "--log-level", "error")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	m.cmd, m.log = cmd, logf
	go func() { _ = cmd.Wait() }()
	return nil
}

// KillMember sends SIGKILL to one member's process.
func (c *Cluster) KillMember(m *Member) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m.cmd != nil && m.cmd.Process != nil {
		_ = m.cmd.Process.Signal(syscall.SIGKILL)
		m.cmd = nil
	}
	if m.log != nil {
		m.log.Close()
		m.log = nil
	}
}

// Kill sends SIGKILL to every member (a member that lost quorum may hang
// on SIGTERM).
func (c *Cluster) Kill() {
	for _, m := range c.Members {
		c.KillMember(m)
	}
}

// Leader returns the member that is the raft leader, asking each member's
// status over the JSON gateway.
func (c *Cluster) Leader(ctx context.Context) (*Member, error) {
	for _, m := range c.Members {
		var st struct {
			Header struct {
				MemberID string `json:"member_id"`
			} `json:"header"`
			Leader string `json:"leader"`
		}
		if err := postJSON(ctx, m.ClientURL+"/v3/maintenance/status", "{}", &st); err != nil {
			continue
		}
		if st.Leader != "" && st.Leader == st.Header.MemberID {
			return m, nil
		}
	}
	return nil, fmt.Errorf("no member reports itself leader")
}

// waitLeaderless waits until member m knows it has no leader (its status
// names none): from then on it refuses proposals instead of appending
// them to its log.
func waitLeaderless(ctx context.Context, m *Member, d time.Duration) error {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		var st struct {
			Leader string `json:"leader"`
		}
		if err := postJSON(ctx, m.ClientURL+"/v3/maintenance/status", "{}", &st); err == nil && (st.Leader == "" || st.Leader == "0") {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("etcd member %s still reports a leader after %v (log %s.log)", m.Name, d, m.Dir)
}

func waitHealthy(ctx context.Context, m *Member, d time.Duration) error {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		var h struct {
			Health string `json:"health"`
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, m.ClientURL+"/health", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			err = decodeBody(resp, &h)
			if err == nil && h.Health == "true" {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("etcd member %s not healthy after %v (log %s.log)", m.Name, d, m.Dir)
}
