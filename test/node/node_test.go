package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/kubetest"
)

// node is one real node: its network namespace, directories, processes
// and the API server it registered to.
type node struct {
	t     *testing.T
	srv   *kubetest.Server
	tools tools
	opts  nodeOptions
	// name is the Node's name, the network namespace's and the
	// datastore partition's (a DNS label).
	name string
	// dir is the node's directory, short (unix socket paths are limited
	// to 108 bytes).
	dir       string
	netns     string // the network namespace's path
	criSocket string
	cniBin    string
	cniConf   string
	conflist  string // the installed config list
	lockDir   string // the plugin's node locks
	agentSock string

	containerd, kubelet, agent, controller *proc

	// nodeProxy forwards the API server's port inside the node's network
	// namespace (where the plugin runs) to the API server; agentProxy is
	// the agent's way to it. Both are cut to make the datastore
	// unreachable.
	nodeProxy, agentProxy *proxy

	knownIDs  map[string]bool
	sysctls   map[string]string
	kubeletKC string
	hadDirs   map[string]bool
}

// nodeOptions are what the scenarios vary.
type nodeOptions struct {
	// ranges is the config list's ipam.ranges (range sets).
	ranges []any
	// noController leaves ipkeeper-controller out.
	noController bool
	// leakGrace is the controller's --leak-grace (default 5s).
	leakGrace time.Duration
	// noGateway leaves the bridge without a gateway address (the bridge
	// plugin takes one subnet per address family as gateway only).
	noGateway bool
}

// path is a path under the node's directory.
func (n *node) path(rel string) string { return filepath.Join(n.dir, rel) }

// startNode starts a node for t — containerd, the kubelet, ipkeeper as
// deploy/ installs it — and waits until the Node is Ready. Everything is
// stopped and removed when t ends.
func startNode(t *testing.T, o nodeOptions) *node {
	t.Helper()
	s, tl := need(t)
	if o.leakGrace == 0 {
		o.leakGrace = 5 * time.Second
	}
	var rnd [3]byte
	_, _ = rand.Read(rnd[:])
	n := &node{t: t, srv: s, tools: tl, opts: o, name: "ipkn-" + hex.EncodeToString(rnd[:]), knownIDs: map[string]bool{}}
	dir, err := os.MkdirTemp("/tmp", "ipkn-")
	if err != nil {
		t.Fatal(err)
	}
	n.dir = dir
	n.netns = "/var/run/netns/" + n.name
	n.criSocket = n.path("c.sock")
	n.cniBin, n.cniConf = n.path("cni/bin"), n.path("cni/net.d")
	n.lockDir, n.agentSock = n.path("run/locks"), n.path("run/agent/agent.sock")
	n.sysctls = saveSysctls(t)
	n.noteHostDirs()
	t.Cleanup(n.teardown)
	for _, d := range []string{n.cniBin, n.cniConf, n.lockDir, n.path("containerd"), n.path("kubelet"), n.path("pod-logs"), n.path("sa")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	run(t, "ip", "netns", "add", n.name)
	run(t, "ip", "-n", n.name, "link", "set", "lo", "up")
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	n.nodeProxy = newProxy(t, n.netns, u.Host, u.Host)
	n.agentProxy = newProxy(t, "", "127.0.0.1:0", u.Host)

	for _, p := range []string{"bridge", "loopback"} {
		copyFile(t, filepath.Join(toolsDir, p), filepath.Join(n.cniBin, p), 0o755)
	}
	n.writeContainerdConfig(t)
	n.startContainerd(t)
	n.importPause(t)
	n.startKubelet(t)
	n.install(t)
	n.startAgent(t)
	if !o.noController {
		n.startController(t)
	}
	n.waitNodeReady(t, 3*time.Minute)
	return n
}

// teardown stops what the node runs and removes what it made.
func (n *node) teardown() {
	t := n.t
	n.controller.stop(10 * time.Second)
	n.kubelet.stop(10 * time.Second)
	n.agent.stop(10 * time.Second)
	n.containerd.stop(10 * time.Second)
	if t.Failed() {
		for _, p := range []*proc{n.containerd, n.kubelet, n.agent, n.controller} {
			if p != nil {
				t.Logf("%s log (end):\n%s", p.name, p.tail(60))
			}
		}
	}
	n.reapRuntime(t)
	if _, err := os.Stat(n.netns); err == nil {
		if out, err := runErr("ip", "netns", "del", n.name); err != nil {
			t.Errorf("ip netns del %s: %v %s", n.name, err, out)
		}
	}
	restoreSysctls(t, n.sysctls)
	if n.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = n.srv.Client.CoreV1().Nodes().Delete(ctx, n.name, deleteNow)
	}
	if os.Getenv("IPKEEPER_KEEP_NODE") == "" {
		if err := os.RemoveAll(n.dir); err != nil {
			t.Errorf("remove %s: %v", n.dir, err)
		}
	} else {
		t.Logf("node directory kept: %s", n.dir)
	}
}

// waitFor polls cond every 250 ms until it holds or timeout passes; the
// failure names what was waited for and cond's last word.
func (n *node) waitFor(t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ok, detail := cond()
		if ok {
			return
		}
		last = detail
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s does not hold; last: %s", timeout, what, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
}

// randSuffix is a short random DNS-label-safe suffix.
func randSuffix() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
