package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipkeeper/ipkeeper/internal/agent/agenttest"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/podinfo"
)

var (
	srv      *kubetest.Server
	agentBin string
	buildErr error
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	s, err := kubetest.StartMain()
	if err != nil && !errors.Is(err, kubetest.ErrNoAPIServer) {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	srv = s
	defer s.Stop()
	dir, err := os.MkdirTemp("", "ipk-agent-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	agentBin, buildErr = agenttest.Build(ctx, dir)
	return m.Run()
}

// TestAgentProcess runs the ipkeeper-agent binary against a real
// kube-apiserver with the node ServiceAccount's shipped RBAC and checks
// that it answers exactly what the plugin's direct lookups read (IPv4 and
// IPv6 nodes), serves cache misses and recreated pods from the API server
// without ever answering another UID, refuses other nodes and the pods
// bound to them, and keeps its socket private.
func TestAgentProcess(t *testing.T) {
	f := fixture(t, "proc")
	kc, pods, ns := f.kubeconfig, f.pods, f.ns
	nodeA, nodeB := f.nodeA, f.nodeB
	a := agenttest.Start(t, agentBin, kc, nodeA, true)
	b := agenttest.Start(t, agentBin, kc, nodeB, true)
	direct, err := podinfo.NewFromKubeconfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	ctx := ctxT(t)

	t.Run("same answers as the direct lookup", func(t *testing.T) {
		for _, tc := range []struct {
			name     string
			agent    *agenttest.Process
			pod, uid string
		}{
			{"IPv4 address annotation, dual-stack node", a, "web-4", string(pods["web-4"].UID)},
			{"IPv6 pools annotation, dual-stack node", a, "web-6", string(pods["web-6"].UID)},
			{"no UID given (older runtimes)", a, "web-4", ""},
			{"IPv6-only node", b, "far-6", string(pods["far-6"].UID)},
			{"no pod: the node only, IPv4+IPv6", a, "", ""},
			{"no pod: the node only, IPv6", b, "", ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				podNS := ns
				if tc.pod == "" {
					podNS = ""
				}
				c := podinfo.NewAgentClient(tc.agent.Socket)
				defer c.Close()
				got, err := c.Lookup(ctx, podNS, tc.pod, tc.uid, tc.agent.Node)
				if err != nil {
					t.Fatal(err)
				}
				want, err := direct.Lookup(ctx, podNS, tc.pod, tc.agent.Node)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("agent answered\n%+v\nthe API server\n%+v", describe(got), describe(want))
				}
				gs, err1 := got.Selection()
				ws, err2 := want.Selection()
				if err1 != nil || err2 != nil || !reflect.DeepEqual(gs, ws) {
					t.Fatalf("selections differ: %+v (%v) vs %+v (%v)", gs, err1, ws, err2)
				}
			})
		}
	})

	t.Run("recreated pod: never another UID", func(t *testing.T) {
		cs := srv.Client
		old := createPod(t, cs, ns, "again", nodeA, map[string]string{"gen": "1"})
		c := podinfo.NewAgentClient(a.Socket)
		defer c.Close()
		if info, err := c.Lookup(ctx, ns, "again", string(old.UID), nodeA); err != nil || info.Pod.UID != string(old.UID) {
			t.Fatalf("first pod: %+v, %v", info, err)
		}
		zero := int64(0)
		if err := cs.CoreV1().Pods(ns).Delete(ctx, "again", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
		fresh := createPod(t, cs, ns, "again", nodeA, map[string]string{"gen": "2"})
		// At once, as a kubelet's ADD: the cache may still hold the old
		// pod; the answer must be the new one.
		info, err := c.Lookup(ctx, ns, "again", string(fresh.UID), nodeA)
		if err != nil || info.Pod.UID != string(fresh.UID) || info.Pod.Annotations["gen"] != "2" {
			t.Fatalf("new pod: %+v, %v; want UID %s gen 2", info, err, fresh.UID)
		}
		for _, uid := range []string{string(old.UID), "00000000-0000-0000-0000-000000000000"} {
			_, err := c.Lookup(ctx, ns, "again", uid, nodeA)
			if !errors.Is(err, podinfo.ErrPodNotFound) || !strings.Contains(err.Error(), uid) || !strings.Contains(err.Error(), string(fresh.UID)) {
				t.Errorf("UID %s: %v, want ErrPodNotFound naming it and the pod's UID %s", uid, err, fresh.UID)
			}
		}
	})

	t.Run("errors", func(t *testing.T) {
		c := podinfo.NewAgentClient(a.Socket)
		defer c.Close()
		for _, tc := range []struct {
			name          string
			ns, pod, node string
			want          error
			mention       []string
		}{
			{"another node", ns, "web-4", nodeB, podinfo.ErrWrongNode, []string{nodeA, nodeB, a.Socket}},
			{"a pod bound to another node", ns, "far-6", nodeA, podinfo.ErrWrongNode, []string{"pod " + ns + "/far-6", nodeA, nodeB}},
			{"node unknown to the agent", "", "", "node-x", podinfo.ErrWrongNode, []string{"node-x"}},
			{"pod gone", ns, "gone", nodeA, podinfo.ErrPodNotFound, []string{"pod " + ns + "/gone"}},
			{"namespace gone", "nope", "web-4", nodeA, podinfo.ErrPodNotFound, []string{"nope"}},
		} {
			_, err := c.Lookup(ctx, tc.ns, tc.pod, "", tc.node)
			if !errors.Is(err, tc.want) {
				t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
				continue
			}
			for _, m := range tc.mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("%s: %q does not name %s", tc.name, err, m)
				}
			}
		}
		if !strings.Contains(a.Log(), `"pod":"far-6"`) || !strings.Contains(a.Log(), "pod not in the cache") {
			t.Errorf("node A's agent did not log reading far-6 from the API server:\n%s", a.Log())
		}
		hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", a.Socket)
		}}}
		defer hc.CloseIdleConnections()
		for _, q := range []string{"", "?pod=web-4&node=" + nodeA, "?uid=x&node=" + nodeA} {
			resp, err := hc.Get("http://agent" + podinfo.AgentLookupPath + q)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), podinfo.ReasonBadRequest) {
				t.Errorf("lookup%s: %d %s, want 400 BadRequest", q, resp.StatusCode, body)
			}
		}
	})

	t.Run("socket private", func(t *testing.T) {
		for path, want := range map[string]os.FileMode{a.Socket: 0o600, filepath.Dir(a.Socket): 0o700} {
			fi, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != want {
				t.Errorf("%s has mode %04o, want %04o", path, fi.Mode().Perm(), want)
			}
		}
		if fi, _ := os.Lstat(a.Socket); fi.Mode().Type() != os.ModeSocket {
			t.Errorf("%s is %v, not a socket", a.Socket, fi.Mode().Type())
		}
	})

	t.Run("probe", func(t *testing.T) {
		if out, err := exec.Command(agentBin, "--probe", "--socket="+a.Socket).CombinedOutput(); err != nil {
			t.Errorf("--probe of a ready agent: %v\n%s", err, out)
		}
		out, err := exec.Command(agentBin, "--probe", "--socket="+filepath.Join(t.TempDir(), "none.sock")).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "cannot be reached") {
			t.Errorf("--probe of no agent: %v\n%s, want exit 1 and the reason", err, out)
		}
	})

	t.Run("SIGTERM removes the socket", func(t *testing.T) {
		if err := b.Stop(); err != nil {
			t.Fatal(err)
		}
		if st, _ := b.Exited(); st == nil || st.ExitCode() != 0 {
			t.Errorf("exit %v, want 0\n%s", st, b.Log())
		}
		if _, err := os.Lstat(b.Socket); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket %s left behind: %v", b.Socket, err)
		}
	})
}

// TestAgentWithoutAccess: an agent whose account RBAC grants nothing never
// becomes ready (STATUS reports it), and its lookups are denied as the
// direct mode's would be.
func TestAgentWithoutAccess(t *testing.T) {
	f := fixture(t, "deny")
	kc := srv.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-nobody")
	p := agenttest.Start(t, agentBin, kc, f.nodeA, false)
	c := podinfo.NewAgentClient(p.Socket)
	defer c.Close()
	ctx := ctxT(t)
	if err := c.Ready(ctx); !errors.Is(err, podinfo.ErrAgentNotReady) {
		t.Errorf("Ready: %v, want ErrAgentNotReady", err)
	}
	if _, err := c.Lookup(ctx, f.ns, "web-4", "", f.nodeA); !errors.Is(err, podinfo.ErrDenied) || !strings.Contains(err.Error(), "403") {
		t.Errorf("Lookup: %v, want ErrDenied (403)", err)
	}
	out, err := exec.Command(agentBin, "--probe", "--socket="+p.Socket).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "not ready") {
		t.Errorf("--probe of an agent that is not ready: %v\n%s", err, out)
	}
}

// TestAgentRefusesUntrustedSocketDir: a socket directory other users may
// write to is refused (the agent exits 1 naming it), and nothing is
// created.
func TestAgentRefusesUntrustedSocketDir(t *testing.T) {
	f := fixture(t, "trust")
	kc := f.kubeconfig
	dir, err := os.MkdirTemp("", "ipk-agent-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sub", "agent.sock")
	// Bounded: an agent that wrongly starts would serve until killed.
	ctx := ctxT(t)
	run := func(args ...string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return exec.CommandContext(ctx, agentBin, args...).CombinedOutput()
	}
	out, err := run("--kubeconfig="+kc, "--node-name="+f.nodeA, "--socket="+sock)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), dir) || !strings.Contains(string(out), "writable by other users") {
		t.Fatalf("exit %v, want 1 naming %s as writable by others:\n%s", err, dir, out)
	}
	if _, err := os.Lstat(filepath.Dir(sock)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s was created: %v", filepath.Dir(sock), err)
	}
	// A regular file where the socket goes is not replaced.
	dir2 := t.TempDir()
	file := filepath.Join(dir2, "agent.sock")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = run("--kubeconfig="+kc, "--node-name="+f.nodeA, "--socket="+file)
	if b, _ := os.ReadFile(file); err == nil || string(b) != "keep" || !strings.Contains(string(out), "not a socket") {
		t.Errorf("over a regular file: %v, file %q\n%s", err, b, out)
	}
}

// TestLookupReadsTheAPIOnMiss drives Lookup in process over caches the
// test fills: a cached pod with another UID than the one asked for is
// read from the API server (the new pod's annotations, never the cached
// one's), the cache answers when the UID matches, and empty caches fall
// back to GETs for pod, namespace and node.
func TestLookupReadsTheAPIOnMiss(t *testing.T) {
	f := fixture(t, "miss")
	kc, pods := f.kubeconfig, f.pods
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a := New(cs, f.nodeA, slog.New(slog.NewTextHandler(io.Discard, nil)))
	// Not started: the caches are empty unless the test puts objects in.
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	a.pods = corelisters.NewPodLister(idx)
	real := pods["web-4"]
	stale := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "web-4", UID: "stale-uid",
		Annotations: map[string]string{podinfo.AnnotationIPAddrs: `["10.244.1.200"]`}}, Spec: corev1.PodSpec{NodeName: f.nodeA}}
	if err := idx.Add(stale); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	info, err := a.Lookup(ctx, f.ns, "web-4", string(real.UID), f.nodeA)
	if err != nil {
		t.Fatal(err)
	}
	if info.Pod.UID != string(real.UID) || info.Pod.Annotations[podinfo.AnnotationIPAddrs] != `["10.244.1.9"]` {
		t.Errorf("pod %+v, want the API server's (UID %s, 10.244.1.9)", info.Pod, real.UID)
	}
	if info.Namespace == nil || info.Namespace.Annotations[podinfo.AnnotationPools] != `["ns-pool"]` || len(info.Node.PodCIDRs) != 2 {
		t.Errorf("namespace %+v node %+v, want them from the API server", info.Namespace, info.Node)
	}
	// The UID the cache holds: the cache answers (no GET would give it).
	info, err = a.Lookup(ctx, f.ns, "web-4", "stale-uid", f.nodeA)
	if err != nil || info.Pod.Annotations[podinfo.AnnotationIPAddrs] != `["10.244.1.200"]` {
		t.Errorf("cached UID: %+v, %v; want the cached pod", info, err)
	}
	// Absent from cache and API server.
	if _, err := a.Lookup(ctx, f.ns, "none", "", f.nodeA); !errors.Is(err, podinfo.ErrPodNotFound) {
		t.Errorf("absent pod: %v, want ErrPodNotFound", err)
	}
	if a.Ready() {
		t.Error("an agent whose informers never started says it is ready")
	}
}

// describe prints an Info's objects rather than their pointers.
func describe(i *podinfo.Info) string {
	var b strings.Builder
	if i.Pod != nil {
		fmt.Fprintf(&b, "pod %+v ", *i.Pod)
	}
	if i.Namespace != nil {
		fmt.Fprintf(&b, "namespace %+v ", *i.Namespace)
	}
	if i.Node != nil {
		fmt.Fprintf(&b, "node %+v", *i.Node)
	}
	return b.String()
}

// BenchmarkAgentLookup is one agent-mode lookup as the plugin makes it, in
// process: a new client, one GET over the unix socket of a running agent
// (pod, namespace and node from its caches), the answer decoded. Run with
// go test -run x -bench AgentLookup ./internal/agent
func BenchmarkAgentLookup(b *testing.B) {
	s := kubetest.Require(b, srv)
	if buildErr != nil {
		b.Fatal(buildErr)
	}
	ctx := context.Background()
	if _, err := s.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-bench"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	p, err := s.Client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bench"},
		Spec: corev1.PodSpec{NodeName: "node-bench", Containers: []corev1.Container{{Name: "c", Image: "x"}}}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	a := agenttest.Start(b, agentBin, s.ServiceAccountKubeconfig(b, "kube-system", "ipkeeper-node"), "node-bench", true)
	for b.Loop() {
		c := podinfo.NewAgentClient(a.Socket)
		if _, err := c.Lookup(ctx, "default", "bench", string(p.UID), "node-bench"); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}
