// Package etcdfault tests ipkeeper against real etcd: the plugin binary as
// a process on embedded etcd, kill -9 of plugin processes, and a
// three-member etcd cluster of separate processes whose leader is killed
// during a run; and pool removal interrupted by a failing write on the
// local store, etcd and the kubernetes datastore of a real kube-apiserver.
package etcdfault

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
	"github.com/ipkeeper/ipkeeper/internal/testenv"
)

var (
	// pluginBin is the ipkeeper binary built for this test run.
	pluginBin string
	// shared is an embedded etcd for the tests that do not kill etcd.
	shared *etcdtest.Server
	// kube is a kube-apiserver with deploy/'s CRDs and RBAC, started by
	// the first test that asks for it (kubeServer) and stopped by TestMain.
	kube struct {
		once sync.Once
		srv  *kubetest.Server
		err  error
	}
)

func TestMain(m *testing.M) {
	// On the kubernetes datastore the plugin execs ipkeeper-kube from its
	// own directory.
	dir, remove, err := testenv.BuildCommands("./cmd/ipkeeper", "./cmd/ipkeeper-kube")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	pluginBin = filepath.Join(dir, "ipkeeper")
	s, stop := etcdtest.Shared()
	shared = s
	code := m.Run()
	stop()
	kube.srv.Stop()
	remove()
	os.Exit(code)
}

// kubeServer returns the package's kube-apiserver, starting it on first
// use. Without a kube-apiserver binary it skips t, or fails it under
// CI=true (kubetest.Require); a server that does not start fails t.
func kubeServer(t *testing.T) *kubetest.Server {
	t.Helper()
	kube.once.Do(func() { kube.srv, kube.err = kubetest.StartMain() })
	if kube.err != nil && !errors.Is(kube.err, kubetest.ErrNoAPIServer) {
		t.Fatal(kube.err)
	}
	return kubetest.Require(t, kube.srv)
}

// netconf is a bridge network config with ipkeeper IPAM on etcd: one IPv4
// and one IPv6 range set side by side.
func netconf(name, node, prefix string, endpoints []string, extra string) []byte {
	eps, _ := json.Marshal(endpoints)
	return fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":%q,"type":"bridge",
	"ipam":{"type":"ipkeeper","nodeName":%q,
	  "datastore":{"type":"etcd","endpoints":%s,"prefix":%q%s},
	  "ranges":[[{"subnet":"10.77.0.0/16"}],[{"subnet":"fd77::/112"}]]}}`, name, node, eps, prefix, extra)
}

// outcome is what one plugin run printed.
type outcome struct {
	IPs    []netip.Addr
	Code   int // CNI error code, 0 on success
	Msg    string
	Stderr string
}

// runPlugin runs the ipkeeper binary for one CNI verb.
func runPlugin(ctx context.Context, t testing.TB, verb, container string, conf []byte, lockDir string, env ...string) (outcome, error) {
	cmd := exec.CommandContext(ctx, pluginBin)
	cmd.Env = append(os.Environ(), "CNI_COMMAND="+verb, "CNI_CONTAINERID="+container,
		"CNI_NETNS=/var/run/netns/"+container, "CNI_IFNAME=eth0", "CNI_PATH=/opt/cni/bin",
		"IPKEEPER_LOCK_DIR="+lockDir)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin = bytes.NewReader(conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	o := outcome{Stderr: stderr.String()}
	if stdout.Len() > 0 {
		var r struct {
			Code int    `json:"code"`
			Msg  string `json:"msg"`
			IPs  []struct {
				Address string `json:"address"`
			} `json:"ips"`
		}
		if jerr := json.Unmarshal(stdout.Bytes(), &r); jerr != nil {
			return o, fmt.Errorf("%s %s: stdout is not JSON: %v\n%s", verb, container, jerr, stdout.String())
		}
		o.Code, o.Msg = r.Code, r.Msg
		for _, ip := range r.IPs {
			p, perr := netip.ParsePrefix(ip.Address)
			if perr != nil {
				return o, fmt.Errorf("%s %s: bad address %q", verb, container, ip.Address)
			}
			o.IPs = append(o.IPs, p.Addr())
		}
	}
	if err != nil && o.Code == 0 {
		return o, fmt.Errorf("%s %s: %v (stderr %s)", verb, container, err, strings.TrimSpace(o.Stderr))
	}
	return o, nil
}

// waitFor polls cond until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if cond() {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return cond()
}

// startCluster builds etcd (cached) and starts a three-member cluster as
// separate processes, killed by PID when the test ends.
func startCluster(t *testing.T) *Cluster {
	t.Helper()
	bin, err := BuildEtcd(testenv.ModuleRoot())
	if err != nil {
		t.Fatal(err)
	}
	cl, err := StartCluster(t.Context(), bin, t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Kill)
	return cl
}
