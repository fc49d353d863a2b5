package e2e

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

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

// kubeHandles lists the handle IDs of a kubernetes datastore.
func kubeHandles(t *testing.T, ds config.Datastore) []string {
	t.Helper()
	s, err := datastore.Open(ctxT(t), ds, datastore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hs, err := allocator.New(s, nil).Handles(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, h := range hs {
		ids = append(ids, h.ID)
	}
	slices.Sort(ids)
	return ids
}

// TestKubernetesDatastore runs the plugin binary as a runtime would on the
// kubernetes datastore of a real kube-apiserver, with the CRDs and the
// node ServiceAccount's kubeconfig and RBAC as deploy/ ships them: the
// plugin hands the config to ipkeeper-kube next to it, and ADD, repeated
// ADD, CHECK, STATUS, GC and DEL work for a native dual-stack config and
// for a whereabouts config (its default datastore, with the kubeconfig
// its kubernetes.kubeconfig names). Without ipkeeper-kube next to the
// plugin, ADD fails with 11 and STATUS with 50, both naming the missing
// file, and nothing is written.
func TestKubernetesDatastore(t *testing.T) {
	needIpkeeper(t)
	needKubeSibling(t)
	srv := kubetest.Start(t)
	// The node's credentials, as the installer writes them on node-a: a
	// token bound to a pod on node-a.
	kc := srv.NodeKubeconfig(t, "node-a")

	t.Run("native dual-stack", func(t *testing.T) {
		ds := config.Datastore{Type: config.DatastoreKubernetes, Kubeconfig: kc, Prefix: "native",
			DialTimeout: config.DefaultDialTimeout, RequestTimeout: config.DefaultRequestTimeout}
		conf := mustJSON(t, map[string]any{"cniVersion": "1.1.0", "name": "kube", "type": "bridge",
			"ipam": map[string]any{"type": "ipkeeper", "nodeName": "node-a",
				"datastore": map[string]any{"type": "kubernetes", "kubeconfig": kc, "prefix": "native"},
				"ranges":    []any{[]any{map[string]any{"subnet": "10.70.0.0/24"}}, []any{map[string]any{"subnet": "fd70::/120"}}}}})
		first := ipamAdd(t, "c1", conf)
		again := ipamAdd(t, "c1", conf)
		if len(first.IPs) != 2 || first.IPs[0].Address.String() != again.IPs[0].Address.String() ||
			first.IPs[1].Address.String() != again.IPs[1].Address.String() {
			t.Fatalf("ADD %v, repeated ADD %v: want the same two addresses", first.IPs, again.IPs)
		}
		if first.IPs[0].Address.IP.To4() == nil || first.IPs[1].Address.IP.To4() != nil {
			t.Fatalf("ADD gave %v, want one IPv4 and one IPv6 address", first.IPs)
		}
		ipamAdd(t, "c2", conf)
		if out := ipamRun(t, "CHECK", "c1", withPrevResult(t, conf, first)); out.ExitCode != 0 {
			t.Fatalf("CHECK c1:\n%v", out)
		}
		if out := ipamRun(t, "STATUS", "", conf); out.ExitCode != 0 {
			t.Fatalf("STATUS:\n%v", out)
		}
		if got := kubeHandles(t, ds); !slices.Equal(got, []string{"kube.c1.eth0", "kube.c2.eth0"}) {
			t.Fatalf("handles after two ADDs: %v", got)
		}
		gc := withValid(t, conf, []types.GCAttachment{{ContainerID: "c2", IfName: "eth0"}})
		if out := ipamRun(t, "GC", "", gc); out.ExitCode != 0 {
			t.Fatalf("GC:\n%v", out)
		}
		if got := kubeHandles(t, ds); !slices.Equal(got, []string{"kube.c2.eth0"}) {
			t.Fatalf("handles after GC keeping c2: %v", got)
		}
		for range 2 { // DEL, and DEL of nothing
			if out := ipamRun(t, "DEL", "c2", conf); out.ExitCode != 0 {
				t.Fatalf("DEL c2:\n%v", out)
			}
		}
		if got := kubeHandles(t, ds); len(got) != 0 {
			t.Fatalf("handles after DEL: %v", got)
		}
	})

	t.Run("whereabouts default datastore", func(t *testing.T) {
		kc := srv.NodeKubeconfig(t, "node-b")
		ds := config.Datastore{Type: config.DatastoreKubernetes, Kubeconfig: kc,
			DialTimeout: config.DefaultDialTimeout, RequestTimeout: config.DefaultRequestTimeout}
		conf := mustJSON(t, map[string]any{"cniVersion": "0.3.1", "name": "whereabouts-conf", "type": "macvlan",
			"ipam": map[string]any{"type": "ipkeeper", "range": "192.168.2.225/28", "exclude": []string{"192.168.2.229/30"},
				"kubernetes": map[string]any{"kubeconfig": kc}, "nodeName": "node-b"}})
		// ipam.kubernetes.kubeconfig also makes the config pod-aware
		// (SPEC), which reads the node's Node object: a cluster has it.
		if _, err := srv.Client.CoreV1().Nodes().Create(ctxT(t), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		res := ipamAdd(t, "w1", conf)
		if len(res.IPs) != 1 || !strings.HasPrefix(res.IPs[0].Address.String(), "192.168.2.") {
			t.Fatalf("whereabouts ADD gave %v", res.IPs)
		}
		if got := kubeHandles(t, ds); !slices.Equal(got, []string{"whereabouts-conf.w1.eth0"}) {
			t.Fatalf("handles after the whereabouts ADD: %v", got)
		}
		if out := ipamRun(t, "DEL", "w1", conf); out.ExitCode != 0 {
			t.Fatalf("DEL w1:\n%v", out)
		}
		if got := kubeHandles(t, ds); len(got) != 0 {
			t.Fatalf("handles after DEL: %v", got)
		}
	})

	t.Run("without ipkeeper-kube", func(t *testing.T) {
		dir := t.TempDir()
		lone := filepath.Join(dir, "ipkeeper")
		data, err := os.ReadFile(ipkeeperBin)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(lone, data, 0o755); err != nil {
			t.Fatal(err)
		}
		ds := config.Datastore{Type: config.DatastoreKubernetes, Kubeconfig: kc, Prefix: "lone",
			DialTimeout: config.DefaultDialTimeout, RequestTimeout: config.DefaultRequestTimeout}
		conf := mustJSON(t, map[string]any{"cniVersion": "1.1.0", "name": "kube", "type": "bridge",
			"ipam": map[string]any{"type": "ipkeeper", "nodeName": "node-a",
				"datastore": map[string]any{"type": "kubernetes", "kubeconfig": kc, "prefix": "lone"},
				"ranges":    []any{[]any{map[string]any{"subnet": "10.71.0.0/24"}}}}})
		missing := filepath.Join(dir, "ipkeeper-kube")
		for _, c := range []struct {
			verb string
			code uint
		}{{"ADD", types.ErrTryAgainLater}, {"STATUS", 50}} {
			out, err := cnirun.Run(ctxT(t), lone, directCall(c.verb, "c1", conf))
			if err != nil {
				t.Fatal(err)
			}
			if e := wantCNIError(t, c.verb+" without ipkeeper-kube", out, c.code); !strings.Contains(e.Msg, missing) {
				t.Fatalf("%s: %q does not name %s", c.verb, e.Msg, missing)
			}
		}
		if got := kubeHandles(t, ds); len(got) != 0 {
			t.Fatalf("handles after the refused ADD: %v", got)
		}
	})
}

// withPrevResult adds res as the config's prevResult, as a runtime's
// CHECK sends it.
func withPrevResult(t *testing.T, conf []byte, res *current.Result) []byte {
	t.Helper()
	var m, r map[string]any
	if err := json.Unmarshal(conf, &m); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(mustJSON(t, res), &r); err != nil {
		t.Fatal(err)
	}
	m["prevResult"] = r
	return mustJSON(t, m)
}

// withValid adds a GC's cni.dev/valid-attachments to the config.
func withValid(t *testing.T, conf []byte, valid []types.GCAttachment) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(conf, &m); err != nil {
		t.Fatal(err)
	}
	if valid == nil {
		valid = []types.GCAttachment{}
	}
	m["cni.dev/valid-attachments"] = valid
	return mustJSON(t, m)
}

// TestKubernetesDatastoreAgent: with ipam.kubernetes.agentSocket, the
// plugin hands its verbs on the kubernetes datastore to the node's
// ipkeeper-agent (real binaries, the node ServiceAccount's RBAC): a
// plugin with no ipkeeper-kube beside it allocates, repeats, checks,
// reports status, collects and releases through the agent, and so does a
// whereabouts config that names the socket; a config of another node is
// refused with 7; once the agent is killed the plugin
// falls back to ipkeeper-kube (11 naming it when it is missing).
func TestKubernetesDatastoreAgent(t *testing.T) {
	needIpkeeper(t)
	needKubeSibling(t)
	needAgent(t)
	srv := kubetest.Start(t)
	kc := srv.NodeKubeconfig(t, "node-a") // as the DaemonSet's pod on node-a has it
	for _, n := range []string{"node-a", "node-b"} {
		if _, err := srv.Client.CoreV1().Nodes().Create(ctxT(t), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	agent := agenttest.Start(t, agentBin, kc, "node-a", true)
	lone := filepath.Join(t.TempDir(), "ipkeeper")
	data, err := os.ReadFile(ipkeeperBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lone, data, 0o755); err != nil {
		t.Fatal(err)
	}
	ds := config.Datastore{Type: config.DatastoreKubernetes, Kubeconfig: kc, Prefix: "agent",
		DialTimeout: config.DefaultDialTimeout, RequestTimeout: config.DefaultRequestTimeout}
	conf := func(node string) []byte {
		return mustJSON(t, map[string]any{"cniVersion": "1.1.0", "name": "kube", "type": "bridge",
			"ipam": map[string]any{"type": "ipkeeper", "nodeName": node,
				"datastore":  map[string]any{"type": "kubernetes", "kubeconfig": kc, "prefix": "agent"},
				"kubernetes": map[string]any{"agentSocket": agent.Socket, "kubeconfig": kc},
				"ranges":     []any{[]any{map[string]any{"subnet": "10.72.0.0/24"}}, []any{map[string]any{"subnet": "fd72::/120"}}}}})
	}
	run := func(bin, verb, id string, stdin []byte) cnirun.Output {
		t.Helper()
		out, err := cnirun.Run(ctxT(t), bin, directCall(verb, id, stdin))
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	add := func(bin, id string) *current.Result {
		t.Helper()
		out := run(bin, "ADD", id, conf("node-a"))
		if out.ExitCode != 0 {
			t.Fatalf("ADD %s:\n%v\nagent log:\n%s", id, out, agent.Log())
		}
		return parseResult(t, "1.1.0", out.Stdout)
	}
	first := add(lone, "c1")
	again := add(lone, "c1")
	if len(first.IPs) != 2 || first.IPs[0].Address.String() != again.IPs[0].Address.String() ||
		first.IPs[1].Address.String() != again.IPs[1].Address.String() {
		t.Fatalf("ADD %v, repeated ADD %v: want the same two addresses", first.IPs, again.IPs)
	}
	add(lone, "c2")
	// A pod's annotation, read by the agent's verb from its own caches:
	// no lookup through its socket (an HTTP round trip to itself).
	pod, err := srv.Client.CoreV1().Pods("default").Create(ctxT(t), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pinned", Annotations: map[string]string{podinfo.AnnotationIPAddrs: `["10.72.0.77","fd72::77"]`}},
		Spec:       corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := cnirun.Run(ctxT(t), lone, podCall("p1", pod, conf("node-a")))
	if err != nil {
		t.Fatal(err)
	}
	if out.ExitCode != 0 {
		t.Fatalf("ADD of an annotated pod:\n%v\nagent log:\n%s", out, agent.Log())
	}
	if got := parseResult(t, "1.1.0", out.Stdout); len(got.IPs) != 2 || got.IPs[0].Address.IP.String() != "10.72.0.77" || got.IPs[1].Address.IP.String() != "fd72::77" {
		t.Fatalf("ADD of a pod annotated %s: got %v", pod.Annotations[podinfo.AnnotationIPAddrs], got.IPs)
	}
	if n := strings.Count(agent.Log(), `"msg":"lookup"`); n != 0 || !strings.Contains(agent.Log(), `"msg":"cni"`) {
		t.Fatalf("the agent's verbs looked up through its own socket %d times:\n%s", n, agent.Log())
	}
	for _, c := range []struct {
		verb, id string
		stdin    []byte
	}{
		{"CHECK", "c1", withPrevResult(t, conf("node-a"), first)},
		{"STATUS", "", conf("node-a")},
		{"GC", "", withValid(t, conf("node-a"), []types.GCAttachment{{ContainerID: "c1", IfName: "eth0"}})},
	} {
		if out := run(lone, c.verb, c.id, c.stdin); out.ExitCode != 0 {
			t.Fatalf("%s through the agent:\n%v\nagent log:\n%s", c.verb, out, agent.Log())
		}
	}
	if got := kubeHandles(t, ds); !slices.Equal(got, []string{"kube.c1.eth0"}) {
		t.Fatalf("handles after GC keeping c1: %v", got)
	}
	wantCNIError(t, "ADD of another node's config through node-a's agent", run(lone, "ADD", "b1", conf("node-b")), types.ErrInvalidNetworkConfig)

	// A whereabouts config as it comes (no nodeName: the node is
	// $NODENAME) with the agent's socket beside its kubeconfig: served by
	// the agent, since this plugin has no ipkeeper-kube beside it.
	wb := mustJSON(t, map[string]any{"cniVersion": "1.1.0", "name": "wb", "type": "macvlan",
		"ipam": map[string]any{"type": "whereabouts", "range": "10.73.0.0/24",
			"kubernetes": map[string]any{"kubeconfig": kc, "agentSocket": agent.Socket}}})
	for _, verb := range []string{"ADD", "DEL"} {
		call := directCall(verb, "w1", wb)
		call.Env = []string{"NODENAME=node-a"}
		out, err := cnirun.Run(ctxT(t), lone, call)
		if err != nil {
			t.Fatal(err)
		}
		if out.ExitCode != 0 {
			t.Fatalf("%s of a whereabouts config through the agent:\n%v\nagent log:\n%s", verb, out, agent.Log())
		}
		if verb != "ADD" {
			continue
		}
		if got := parseResult(t, "1.1.0", out.Stdout); len(got.IPs) != 1 || !netip.MustParsePrefix("10.73.0.0/24").Contains(netip.MustParseAddr(got.IPs[0].Address.IP.String())) {
			t.Fatalf("ADD of a whereabouts config of 10.73.0.0/24 through the agent: %v", got.IPs)
		}
	}

	agent.Kill()
	if e := wantCNIError(t, "ADD with the agent killed and no ipkeeper-kube", run(lone, "ADD", "c3", conf("node-a")), types.ErrTryAgainLater); !strings.Contains(e.Msg, "ipkeeper-kube") {
		t.Fatalf("%q does not name ipkeeper-kube", e.Msg)
	}
	if out := run(ipkeeperBin, "DEL", "c1", conf("node-a")); out.ExitCode != 0 {
		t.Fatalf("DEL through ipkeeper-kube with the agent killed:\n%v", out)
	}
	if got := kubeHandles(t, ds); len(got) != 0 {
		t.Fatalf("handles after DEL: %v", got)
	}
}
