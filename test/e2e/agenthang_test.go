package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/agent/agenttest"
	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/podinfo"
	"github.com/ipkeeper/ipkeeper/test/e2e/cnirun"
)

// hangTimeout is the plugin's IPKEEPER_TIMEOUT in TestAgentHung: the
// agent gets half of it at most, the fallback the rest.
const hangTimeout = 12 * time.Second

// fakeAgent is a unix socket in the agent's place that accepts
// connections and never answers on them; with forward set it passes each
// request on to the real agent and keeps the agent's answer to itself.
type fakeAgent struct {
	path     string
	mu       sync.Mutex
	accepted int
	answers  [][]byte
	gotAns   chan struct{}
}

func startFakeAgent(t *testing.T, forward string) *fakeAgent {
	t.Helper()
	dir, err := os.MkdirTemp("", "ipk-hang-") // short: a socket path fits 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	f := &fakeAgent{path: filepath.Join(dir, "agent.sock"), gotAns: make(chan struct{}, 16)}
	l, err := net.Listen("unix", f.path)
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		f.mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		f.mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.accepted++
			conns = append(conns, c)
			f.mu.Unlock()
			if forward == "" {
				continue // holds it open, silent
			}
			wg.Go(func() {
				a, err := net.Dial("unix", forward)
				if err != nil {
					return
				}
				defer a.Close()
				go func() { _, _ = io.Copy(a, c) }()
				ans, _ := io.ReadAll(a) // the request says Connection: close
				f.mu.Lock()
				f.answers = append(f.answers, ans)
				f.mu.Unlock()
				f.gotAns <- struct{}{}
			})
		}
	})
	return f
}

func (f *fakeAgent) connections() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.accepted
}

// kubeOwners counts the addresses each handle holds in the blocks of a
// kubernetes datastore.
func kubeOwners(t *testing.T, ds config.Datastore) map[string]int {
	t.Helper()
	s, err := datastore.Open(ctxT(t), ds, datastore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	blocks, err := allocator.New(s, nil).Blocks(ctxT(t), "")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, b := range blocks {
		for _, h := range b.Owners {
			out[h]++
		}
	}
	return out
}

func ipStrings(r *current.Result) []string {
	var out []string
	for _, ip := range r.IPs {
		out = append(out, ip.Address.String())
	}
	slices.Sort(out)
	return out
}

// TestAgentHung: an agent that accepts ADD but does not answer — a
// silent socket, an agent whose answer is lost, an agent stopped with
// SIGSTOP — costs the plugin its share of the call, not the call: the ADD
// is served by ipkeeper-kube well within IPKEEPER_TIMEOUT, ipkeeper-kube
// does not ask the agent again, and the attachment holds one address per
// family — the one the agent allocated, when it did.
func TestAgentHung(t *testing.T) {
	needIpkeeper(t)
	needKubeSibling(t)
	needAgent(t)
	srv := kubetest.Start(t)
	kc := srv.NodeKubeconfig(t, "node-a") // the node's bound token, as the DaemonSet's agent and plugin have
	if _, err := srv.Client.CoreV1().Nodes().Create(ctxT(t), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	agent := agenttest.Start(t, agentBin, kc, "node-a", true)
	setup := func(socket, prefix string) ([]byte, config.Datastore) {
		conf := mustJSON(t, map[string]any{"cniVersion": "1.1.0", "name": "kube", "type": "bridge",
			"ipam": map[string]any{"type": "ipkeeper", "nodeName": "node-a",
				"datastore":  map[string]any{"type": "kubernetes", "kubeconfig": kc, "prefix": prefix},
				"kubernetes": map[string]any{"agentSocket": socket, "kubeconfig": kc},
				"ranges":     []any{[]any{map[string]any{"subnet": "10.74.0.0/24"}}, []any{map[string]any{"subnet": "fd74::/120"}}}}})
		return conf, config.Datastore{Type: config.DatastoreKubernetes, Kubeconfig: kc, Prefix: prefix,
			DialTimeout: config.DefaultDialTimeout, RequestTimeout: config.DefaultRequestTimeout}
	}
	// add runs ADD through the plugin with hangTimeout and wants it
	// served within it.
	add := func(t *testing.T, id string, conf []byte) *current.Result {
		t.Helper()
		call := directCall("ADD", id, conf)
		call.Env = []string{"IPKEEPER_TIMEOUT=" + hangTimeout.String()}
		out, err := cnirun.Run(ctxT(t), ipkeeperBin, call)
		if err != nil {
			t.Fatal(err)
		}
		if out.ExitCode != 0 {
			t.Fatalf("ADD %s:\n%v\nagent log:\n%s", id, out, agent.Log())
		}
		if out.Duration >= hangTimeout {
			t.Fatalf("ADD %s took %v, more than IPKEEPER_TIMEOUT=%v", id, out.Duration, hangTimeout)
		}
		return parseResult(t, "1.1.0", out.Stdout)
	}
	// held wants the attachment id to hold exactly one address per family.
	held := func(t *testing.T, ds config.Datastore, id string) {
		t.Helper()
		want := map[string]int{"kube." + id + ".eth0": 2}
		if got := kubeOwners(t, ds); len(got) != 1 || got["kube."+id+".eth0"] != 2 {
			t.Fatalf("addresses held per handle: %v, want %v", got, want)
		}
	}

	t.Run("silent socket", func(t *testing.T) {
		fake := startFakeAgent(t, "")
		conf, ds := setup(fake.path, "silent")
		first := add(t, "c1", conf)
		if n := fake.connections(); n != 1 {
			t.Fatalf("the silent agent was asked %d times, want once (ipkeeper-kube must not ask it again)", n)
		}
		if again := add(t, "c1", conf); !slices.Equal(ipStrings(again), ipStrings(first)) {
			t.Fatalf("repeated ADD: %v, first %v", ipStrings(again), ipStrings(first))
		}
		held(t, ds, "c1")
	})

	// Both the agent and the API server hang: the call still ends within
	// its timeout — the fallback inherits the plugin's deadline instead
	// of starting one of its own — with 11.
	t.Run("fallback hangs too", func(t *testing.T) {
		fake := startFakeAgent(t, "")
		hole, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var conns []net.Conn
		t.Cleanup(func() {
			hole.Close()
			mu.Lock()
			defer mu.Unlock()
			for _, c := range conns {
				c.Close()
			}
		})
		go func() {
			for {
				c, err := hole.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				conns = append(conns, c) // never answers, not even TLS
				mu.Unlock()
			}
		}()
		b, err := os.ReadFile(kc)
		if err != nil {
			t.Fatal(err)
		}
		silentKC := filepath.Join(t.TempDir(), "silent.kubeconfig")
		if err := os.WriteFile(silentKC, []byte(strings.ReplaceAll(string(b), srv.URL, "https://"+hole.Addr().String())), 0o600); err != nil {
			t.Fatal(err)
		}
		conf := mustJSON(t, map[string]any{"cniVersion": "1.1.0", "name": "kube", "type": "bridge",
			"ipam": map[string]any{"type": "ipkeeper", "nodeName": "node-a",
				"datastore":  map[string]any{"type": "kubernetes", "kubeconfig": silentKC, "prefix": "hole", "requestTimeout": "5m", "dialTimeout": "5m"},
				"kubernetes": map[string]any{"agentSocket": fake.path, "kubeconfig": silentKC},
				"ranges":     []any{[]any{map[string]any{"subnet": "10.74.0.0/24"}}}}})
		call := directCall("ADD", "c4", conf)
		call.Env = []string{"IPKEEPER_TIMEOUT=" + hangTimeout.String()}
		out, err := cnirun.Run(ctxT(t), ipkeeperBin, call)
		if err != nil {
			t.Fatal(err)
		}
		wantCNIError(t, "ADD with the agent and the API server silent", out, types.ErrTryAgainLater)
		// The watchdog's own slack: a result being written gets 2 s.
		if out.Duration >= hangTimeout+2*time.Second {
			t.Fatalf("ADD took %v, past IPKEEPER_TIMEOUT=%v:\n%v", out.Duration, hangTimeout, out)
		}
		if n := fake.connections(); n != 1 {
			t.Fatalf("the silent agent was asked %d times, want once", n)
		}
	})

	t.Run("answer lost", func(t *testing.T) {
		proxy := startFakeAgent(t, agent.Socket)
		conf, ds := setup(proxy.path, "lost")
		res := add(t, "c2", conf)
		select {
		case <-proxy.gotAns:
		case <-time.After(time.Minute):
			t.Fatalf("the agent did not answer the forwarded ADD:\n%s", agent.Log())
		}
		proxy.mu.Lock()
		raw := proxy.answers[0]
		proxy.mu.Unlock()
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
		if err != nil {
			t.Fatalf("the agent's answer: %v\n%s", err, raw)
		}
		var ans podinfo.CNIAnswer
		if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil || ans.Error != nil {
			t.Fatalf("the agent's answer: %v %+v", err, ans.Error)
		}
		agentRes := parseResult(t, "1.1.0", ans.Stdout)
		if !slices.Equal(ipStrings(res), ipStrings(agentRes)) {
			t.Fatalf("ipkeeper-kube's ADD returned %v, the agent's (unanswered) ADD allocated %v: want the same", ipStrings(res), ipStrings(agentRes))
		}
		if n := proxy.connections(); n != 1 {
			t.Fatalf("the agent's socket was asked %d times, want once", n)
		}
		held(t, ds, "c2")
	})

	t.Run("stopped agent", func(t *testing.T) {
		conf, ds := setup(agent.Socket, "stopped")
		if err := agent.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		resumed := false
		resume := func() {
			if !resumed {
				resumed = true
				if err := agent.Signal(syscall.SIGCONT); err != nil {
					t.Error(err)
				}
			}
		}
		t.Cleanup(resume)
		res := add(t, "c3", conf)
		resume()
		// The agent goes on with the request it took while stopped (its
		// caller gone), then serves the same ADD again: the same
		// addresses, held once.
		deadline := time.Now().Add(time.Minute)
		for strings.Count(agent.Log(), `"container":"c3"`) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("the resumed agent did not handle the request it took while stopped:\n%s", agent.Log())
			}
			time.Sleep(50 * time.Millisecond)
		}
		again := add(t, "c3", conf)
		if !slices.Equal(ipStrings(again), ipStrings(res)) {
			t.Fatalf("ADD through the resumed agent: %v, through ipkeeper-kube while it was stopped: %v", ipStrings(again), ipStrings(res))
		}
		held(t, ds, "c3")
	})
}
