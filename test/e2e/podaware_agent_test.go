package e2e

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/agent/agenttest"
	"github.com/ipkeeper/ipkeeper/internal/podinfo"
	"github.com/ipkeeper/ipkeeper/test/e2e/cnirun"
)

// agentBin is ./cmd/ipkeeper-agent, built by TestMain; agentBuildErr is
// set instead when that failed.
var (
	agentBin      string
	agentBuildErr error
)

// needAgent fails the test when ipkeeper-agent did not build.
func needAgent(t testing.TB) {
	t.Helper()
	if agentBuildErr != nil {
		t.Fatalf("building ./cmd/ipkeeper-agent: %v", agentBuildErr)
	}
}

// agentNodes are the Nodes of newKubeFixture; an agent serves one of them.
var agentNodes = map[string]bool{"node-a": true, "node-b": true, "node-c": true}

// agentSet starts ipkeeper-agent processes on demand, one per account
// and node, for as long as the test that made the set runs.
type agentSet struct {
	t      testing.TB
	mainKC string // the node account's: its agents must be ready
	mu     sync.Mutex
	procs  map[[2]string]*agenttest.Process
}

func newAgentSet(t testing.TB, nodeKubeconfig string) *agentSet {
	return &agentSet{t: t, mainKC: nodeKubeconfig, procs: map[[2]string]*agenttest.Process{}}
}

// get returns the agent with kubeconfig's account serving node (node-a
// for a node the API does not know: it refuses that node).
func (s *agentSet) get(kubeconfig, node string) *agenttest.Process {
	if !agentNodes[node] {
		node = "node-a"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]string{kubeconfig, node}
	if p := s.procs[k]; p != nil {
		return p
	}
	p := agenttest.Start(s.t, agentBin, kubeconfig, node, kubeconfig == s.mainKC)
	s.procs[k] = p
	return p
}

// socket is get's socket.
func (s *agentSet) socket(t testing.TB, kubeconfig, node string) string {
	t.Helper()
	return s.get(kubeconfig, node).Socket
}

// waitGone waits (bounded) until node's agent no longer answers with the
// deleted pod p: its cache has seen the deletion.
func (s *agentSet) waitGone(t testing.TB, node string, p *corev1.Pod) {
	t.Helper()
	c := podinfo.NewAgentClient(s.get(s.mainKC, node).Socket)
	defer c.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := c.Lookup(ctxT(t), p.Namespace, p.Name, string(p.UID), node)
		if errors.Is(err, podinfo.ErrPodNotFound) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent still answers for deleted pod %s/%s after a minute: %v", p.Namespace, p.Name, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPodAwareAgent covers what only the agent mode has, with the real
// plugin and agent binaries against a real kube-apiserver: an agent that
// is killed (ADD falls back to the kubeconfig when one is given, else
// fails with 11 naming the socket; STATUS 50 without a fallback), an
// agent that is not ready (STATUS 50), a restarted agent over the socket
// its killed predecessor left, a request for another node refused (7),
// and a pod recreated under the same name: an ADD for the old UID is
// never given the new pod's annotations.
func TestPodAwareAgent(t *testing.T) {
	needIpkeeper(t)
	needCtl(t)
	needAgent(t)
	f := newKubeFixture(t).inMode(t, "agent")
	agent := f.agents.get(f.kc, "node-a")
	// Configs: the agent alone, and the agent with the kubeconfig as
	// fallback, IPv4 and IPv6 ranges.
	v4 := map[string]any{"ranges": [][]map[string]any{{{"subnet": "10.95.0.0/24"}}}}
	v6 := map[string]any{"ranges": [][]map[string]any{{{"subnet": "fd95::/64"}}}}
	only := map[string]any{"kubernetes": map[string]any{"agentSocket": agent.Socket}}
	fallback := map[string]any{"kubernetes": map[string]any{"agentSocket": agent.Socket, "kubeconfig": f.kc}}
	add := func(t *testing.T, id string, stdin []byte, ann map[string]string) (*corev1.Pod, cnirun.Output) {
		t.Helper()
		p := f.pod(t, "ns-plain", id, "node-a", ann)
		out, err := cnirun.Run(ctxT(t), ipkeeperBin, podCall(id, p, stdin))
		if err != nil {
			t.Fatal(err)
		}
		return p, out
	}
	status := func(t *testing.T, stdin []byte) cnirun.Output {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := cnirun.Run(ctx, ipkeeperBin, cnirun.Call{Command: "STATUS", Path: toolsDir, Stdin: stdin})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	wantAddrs := func(t *testing.T, stdin []byte, out cnirun.Output, prefix string) {
		t.Helper()
		got := addrsOf(t, stdin, out)
		if len(got) != 1 || !strings.HasPrefix(got[0].String(), prefix) {
			t.Fatalf("got %v, want one %s* address", got, prefix)
		}
	}

	t.Run("agent up", func(t *testing.T) {
		for _, fam := range []struct {
			name   string
			ranges map[string]any
			prefix string
		}{{"v4", v4, "10.98.0."}, {"v6", v6, "fd98::"}} {
			stdin := f.podConf(t, "node-a", merge(fam.ranges, only))
			if out := status(t, stdin); out.ExitCode != 0 {
				t.Fatalf("STATUS with a ready agent: %v", out)
			}
			// A pool annotation read through the agent.
			pool := map[string]string{"v4": "blue4", "v6": "blue6"}[fam.name]
			_, out := add(t, "up-"+fam.name, stdin, map[string]string{"ipkeeper.io/pools": `["` + pool + `"]`})
			wantAddrs(t, stdin, out, fam.prefix)
		}
	})

	t.Run("another node refused", func(t *testing.T) {
		stdin := f.podConf(t, "node-b", merge(v4, only)) // node-a's agent
		_, out := add(t, "wrong-node", stdin, map[string]string{})
		e := wantCNIError(t, "ADD", out, uint(types.ErrInvalidNetworkConfig))
		for _, m := range []string{`"node-b"`, `"node-a"`, agent.Socket} {
			if !strings.Contains(e.Msg, m) {
				t.Errorf("message %q does not name %s", e.Msg, m)
			}
		}
	})

	t.Run("recreated pod, old UID", func(t *testing.T) {
		stdin := f.podConf(t, "node-a", merge(v4, only))
		old := f.pod(t, "ns-plain", "again", "node-a", map[string]string{"ipkeeper.io/pools": `["blue4"]`})
		zero := int64(0)
		if err := f.cs.CoreV1().Pods("ns-plain").Delete(ctxT(t), "again", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
		fresh := f.pod(t, "ns-plain", "again", "node-a", map[string]string{"ipkeeper.io/pools": `["calico4"]`})
		out, err := cnirun.Run(ctxT(t), ipkeeperBin, podCall("again-old", old, stdin))
		if err != nil {
			t.Fatal(err)
		}
		e := wantCNIError(t, "ADD", out, uint(types.ErrTryAgainLater))
		if !strings.Contains(e.Msg, string(old.UID)) || !strings.Contains(e.Msg, string(fresh.UID)) {
			t.Errorf("message %q does not name the UID asked for and the pod's", e.Msg)
		}
		out, err = cnirun.Run(ctxT(t), ipkeeperBin, podCall("again-new", fresh, stdin))
		if err != nil {
			t.Fatal(err)
		}
		wantAddrs(t, stdin, out, "10.96.8.")
	})

	t.Run("agent not ready", func(t *testing.T) {
		nobody := f.agents.get(f.srv.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-nobody"), "node-a")
		out := status(t, f.podConf(t, "node-a", merge(v4, map[string]any{"kubernetes": map[string]any{"agentSocket": nobody.Socket}})))
		e := wantCNIError(t, "STATUS", out, 50)
		if !strings.Contains(e.Msg, nobody.Socket) || !strings.Contains(e.Msg, "not ready") {
			t.Errorf("message %q does not say the agent at %s is not ready", e.Msg, nobody.Socket)
		}
		// With a kubeconfig, ADD can read the API server itself.
		out = status(t, f.podConf(t, "node-a", merge(v4, map[string]any{"kubernetes": map[string]any{"agentSocket": nobody.Socket, "kubeconfig": f.kc}})))
		if out.ExitCode != 0 {
			t.Errorf("STATUS of a not-ready agent with a kubeconfig fallback: %v", out)
		}
	})

	t.Run("agent killed", func(t *testing.T) {
		agent.Kill()
		for _, fam := range []struct {
			name   string
			ranges map[string]any
			prefix string
		}{{"v4", v4, "10.98.0."}, {"v6", v6, "fd98::"}} {
			t.Run(fam.name, func(t *testing.T) {
				pool := map[string]string{"v4": "blue4", "v6": "blue6"}[fam.name]
				ann := map[string]string{"ipkeeper.io/pools": `["` + pool + `"]`}
				// With a kubeconfig: the same allocation, read directly.
				stdin := f.podConf(t, "node-a", merge(fam.ranges, fallback))
				_, out := add(t, "killed-fallback-"+fam.name, stdin, ann)
				wantAddrs(t, stdin, out, fam.prefix)
				if !strings.Contains(string(out.Stderr), "ipkeeper agent unreachable") {
					t.Errorf("the plugin did not log the fallback:\n%s", out.Stderr)
				}
				if out := status(t, stdin); out.ExitCode != 0 {
					t.Errorf("STATUS with a kubeconfig fallback: %v", out)
				}
				// Without: try again later, naming the socket.
				stdin = f.podConf(t, "node-a", merge(fam.ranges, only))
				_, out = add(t, "killed-only-"+fam.name, stdin, ann)
				e := wantCNIError(t, "ADD", out, uint(types.ErrTryAgainLater))
				if !strings.Contains(e.Msg, agent.Socket) || !strings.Contains(e.Msg, "ipam.kubernetes.agentSocket") {
					t.Errorf("message %q does not name the socket and its key", e.Msg)
				}
				e = wantCNIError(t, "STATUS", status(t, stdin), 50)
				if !strings.Contains(e.Msg, agent.Socket) {
					t.Errorf("STATUS message %q does not name the socket", e.Msg)
				}
			})
		}
	})

	t.Run("agent restarted over the stale socket", func(t *testing.T) {
		agenttest.StartAt(t, agentBin, f.kc, "node-a", agent.Socket, true)
		stdin := f.podConf(t, "node-a", merge(v4, only))
		_, out := add(t, "restarted", stdin, map[string]string{})
		wantAddrs(t, stdin, out, "10.95.0.")
	})
}
