package e2e

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/test/e2e/cnirun"
)

// kubeFixture is a real kube-apiserver with the plugin's ServiceAccount
// kubeconfig, a local store and pools made with ipkeeperctl.
type kubeFixture struct {
	srv   *kubetest.Server
	cs    kubernetes.Interface
	kc    string // kubeconfig of kube-system/ipkeeper-node (RBAC from deploy/)
	store string
	// agents, when not nil, makes podConf name an ipkeeper-agent's socket
	// instead of the kubeconfig (see withAgents).
	agents *agentSet
}

// podConf is a pod-aware network config on the fixture's store: it names
// the kubeconfig, or in agent mode the socket of node's agent (and no
// kubeconfig, so that only the agent can answer).
func (f *kubeFixture) podConf(t testing.TB, node string, ipam map[string]any) []byte {
	t.Helper()
	i := map[string]any{"type": "ipkeeper", "datastore": map[string]any{"type": "local", "path": f.store},
		"nodeName": node, "ranges": [][]map[string]any{{{"subnet": "10.95.0.0/24"}}}}
	if _, ok := ipam["kubernetes"]; !ok {
		i["kubernetes"] = f.kubernetes(t, f.kc, node)
	}
	for k, v := range ipam {
		i[k] = v
	}
	return mustJSON(t, map[string]any{"cniVersion": "1.1.0", "name": "podnet", "type": "bridge", "ipam": i})
}

// pod creates a pod bound to node with the given annotations.
func (f *kubeFixture) pod(t testing.TB, ns, name, node string, ann map[string]string) *corev1.Pod {
	t.Helper()
	p, err := f.cs.CoreV1().Pods(ns).Create(ctxT(t), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// podCall is ADD of the pod's sandbox as a kubelet makes it.
func podCall(id string, p *corev1.Pod, stdin []byte) cnirun.Call {
	c := directCall("ADD", id, stdin)
	if p != nil {
		c.Args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=" + p.Namespace + ";K8S_POD_NAME=" + p.Name + ";K8S_POD_INFRA_CONTAINER_ID=" + id + ";K8S_POD_UID=" + string(p.UID)
	}
	return c
}

// addrsOf returns the result's addresses.
func addrsOf(t *testing.T, stdin []byte, out cnirun.Output) []netip.Addr {
	t.Helper()
	if out.ExitCode != 0 {
		t.Fatalf("ADD failed:\n%v", out)
	}
	var got []netip.Addr
	for _, ip := range parseResult(t, confVersion(t, stdin), out.Stdout).IPs {
		a, _ := netip.AddrFromSlice(ip.Address.IP)
		got = append(got, a.Unmap())
	}
	return got
}

// kubernetes is the ipam.kubernetes object for the account of kubeconfig
// on node: the kubeconfig, or in agent mode the socket of an agent with
// that account serving node (node-a's for a node the API does not know).
func (f *kubeFixture) kubernetes(t testing.TB, kubeconfig, node string) map[string]any {
	if f.agents == nil {
		return map[string]any{"kubeconfig": kubeconfig}
	}
	return map[string]any{"agentSocket": f.agents.socket(t, kubeconfig, node)}
}

func newKubeFixture(t testing.TB) *kubeFixture {
	t.Helper()
	srv := kubetest.Start(t)
	f := &kubeFixture{srv: srv, cs: srv.Client, store: t.TempDir(),
		kc: srv.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-node")}
	ctx := ctxT(t)
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "ns-plain"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "ns-blue", Annotations: map[string]string{"ipkeeper.io/pools": `["blue4", "blue6"]`}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "ns-calico", Annotations: map[string]string{"cni.projectcalico.org/ipv6pools": `["blue6"]`}}},
	} {
		if _, err := f.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{"zone": "a"}},
			Spec: corev1.NodeSpec{PodCIDR: "10.99.1.0/24", PodCIDRs: []string{"10.99.1.0/24", "fd99:1::/64"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "node-b", Labels: map[string]string{"zone": "b"}},
			Spec: corev1.NodeSpec{PodCIDR: "10.99.2.0/24", PodCIDRs: []string{"10.99.2.0/24"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "node-c"}},
	} {
		if _, err := f.cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f.makePools(t)
	return f
}

// makePools creates the pools the pod-aware tests use in the fixture's
// store.
func (f *kubeFixture) makePools(t testing.TB) {
	t.Helper()
	cf := writeTemp(t, f.podConf(t, "node-a", nil))
	for _, p := range [][]string{
		{"blue4", "--cidr", "10.98.0.0/24"}, {"blue6", "--cidr", "fd98::/64"},
		{"red4", "--cidr", "10.97.0.0/24", "--node-selector", "zone=b"},
		{"calico4", "--cidr", "10.96.8.0/24"},
	} {
		ctl(t, cf, append([]string{"pool", "add"}, p...)...)
	}
}

// modes are the two ways the plugin reads the API: directly with the
// kubeconfig, or from the node's ipkeeper-agent.
var modes = []string{"direct", "agent"}

// inMode returns a copy of the fixture on a new store (with the pools)
// for mode; "agent" starts agents (binary ipkeeper-agent) as configs
// need them, for as long as t runs.
func (f *kubeFixture) inMode(t *testing.T, mode string) *kubeFixture {
	t.Helper()
	m := *f
	m.store = t.TempDir()
	if mode == "agent" {
		m.agents = newAgentSet(t, f.kc)
	}
	m.makePools(t)
	return &m
}

// TestPodAware runs the plugin binary in pod-aware mode against a real
// kube-apiserver with the plugin's shipped RBAC: pools chosen by the
// pod's, then the namespace's ipkeeper.io/pools or Calico's
// ipv4pools/ipv6pools annotations, static addresses from
// ipkeeper.io/ip-addrs and Calico's ipAddrs (102 when taken), pool node
// selectors matched against the Node's labels (101 naming pool and
// node), usePodCidr ranges from the Node's spec.podCIDRs, and the
// failures a pod-aware call can meet.
func TestPodAware(t *testing.T) {
	needIpkeeper(t)
	needCtl(t)
	base := newKubeFixture(t)
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			if mode == "agent" {
				needAgent(t)
			}
			testPodAware(t, base.inMode(t, mode), mode)
		})
	}
}

// testPodAware is TestPodAware's cases in one mode ("direct" or "agent").
func testPodAware(t *testing.T, f *kubeFixture, mode string) {
	type tc struct {
		name       string
		node       string
		ipam       map[string]any
		ns         string
		ann        map[string]string // nil: no pod at all (not a Kubernetes pod)
		want       []string          // address prefixes, in result order
		code       uint
		mention    []string
		kubeconfig string
	}
	cases := []tc{
		{name: "plain pod: the config's range", node: "node-a", ns: "ns-plain", ann: map[string]string{}, want: []string{"10.95.0."}},
		{name: "no pod named: the config's range", node: "node-a", want: []string{"10.95.0."}},
		{name: "pod ipkeeper.io/pools v4", node: "node-a", ns: "ns-plain", ann: map[string]string{"ipkeeper.io/pools": `["blue4"]`}, want: []string{"10.98.0."}},
		{name: "pod ipkeeper.io/pools v6", node: "node-a", ns: "ns-plain", ann: map[string]string{"ipkeeper.io/pools": `["blue6"]`}, want: []string{"fd98::"}},
		{name: "namespace ipkeeper.io/pools, dual-stack", node: "node-a", ns: "ns-blue", ann: map[string]string{}, want: []string{"10.98.0.", "fd98::"}},
		{name: "the pod's annotation before the namespace's", node: "node-a", ns: "ns-blue", ann: map[string]string{"ipkeeper.io/pools": `["calico4"]`}, want: []string{"10.96.8."}},
		{name: "Calico ipv4pools by name", node: "node-a", ns: "ns-plain", ann: map[string]string{"cni.projectcalico.org/ipv4pools": `["calico4"]`}, want: []string{"10.96.8."}},
		{name: "Calico ipv4pools by CIDR, ipv6pools added", node: "node-a", ns: "ns-plain",
			ann: map[string]string{"cni.projectcalico.org/ipv4pools": `["10.96.8.0/24"]`, "cni.projectcalico.org/ipv6pools": `["fd98::/64"]`}, want: []string{"10.96.8.", "fd98::"}},
		{name: "namespace Calico ipv6pools beside the config's IPv4 range", node: "node-a", ns: "ns-calico", ann: map[string]string{}, want: []string{"10.95.0.", "fd98::"}},
		{name: "ipkeeper.io/ip-addrs v4", node: "node-a", ns: "ns-plain", ann: map[string]string{"ipkeeper.io/ip-addrs": `["10.95.0.77"]`}, want: []string{"10.95.0.77"}},
		{name: "ipkeeper.io/ip-addrs taken", node: "node-a", ns: "ns-plain", ann: map[string]string{"ipkeeper.io/ip-addrs": `["10.95.0.77"]`},
			code: 102, mention: []string{"10.95.0.77"}},
		{name: "Calico ipAddrs v6 with ipkeeper.io/pools", node: "node-a", ns: "ns-plain",
			ann: map[string]string{"ipkeeper.io/pools": `["blue6"]`, "cni.projectcalico.org/ipAddrs": `["fd98::77"]`}, want: []string{"fd98::77"}},
		{name: "static address in no pool of the pod", node: "node-a", ns: "ns-plain", ann: map[string]string{"cni.projectcalico.org/ipAddrs": `["10.97.0.5"]`},
			code: 102, mention: []string{"10.97.0.5"}},
		{name: "node selector refuses node-a", node: "node-a", ns: "ns-plain", ann: map[string]string{"ipkeeper.io/pools": `["red4"]`},
			code: 101, mention: []string{"red4", "node-a"}},
		{name: "node selector admits node-b", node: "node-b", ns: "ns-plain", ann: map[string]string{"ipkeeper.io/pools": `["red4"]`}, want: []string{"10.97.0."}},
		{name: "usePodCidr dual-stack on node-a", node: "node-a", ipam: map[string]any{"ranges": [][]map[string]any{{{"subnet": "usePodCidr"}}, {{"subnet": "usePodCidrIPv6"}}}},
			ns: "ns-plain", ann: map[string]string{}, want: []string{"10.99.1.", "fd99:1::"}},
		{name: "usePodCidr on node-b", node: "node-b", ipam: map[string]any{"subnet": "usePodCidr", "ranges": nil},
			ns: "ns-plain", ann: map[string]string{}, want: []string{"10.99.2."}},
		{name: "usePodCidrIPv6 on a node without one", node: "node-b", ipam: map[string]any{"ranges": [][]map[string]any{{{"subnet": "usePodCidrIPv6"}}}},
			ns: "ns-plain", ann: map[string]string{}, code: 101, mention: []string{"node-b", "IPv6"}},
		{name: "usePodCidr on a node without pod CIDRs", node: "node-c", ipam: map[string]any{"ranges": [][]map[string]any{{{"subnet": "usePodCidr"}}}},
			ns: "ns-plain", ann: map[string]string{}, code: 101, mention: []string{"node-c"}},
		{name: "unknown pool", node: "node-a", ns: "ns-plain", ann: map[string]string{"ipkeeper.io/pools": `["nope"]`},
			code: uint(types.ErrInvalidNetworkConfig), mention: []string{"nope", "ipkeeper.io/pools"}},
		{name: "malformed annotation", node: "node-a", ns: "ns-plain", ann: map[string]string{"ipkeeper.io/pools": `blue4`},
			code: uint(types.ErrInvalidNetworkConfig), mention: []string{"ipkeeper.io/pools", "not a JSON list"}},
		{name: "IPv6 pool named as ipv4pools", node: "node-a", ns: "ns-plain", ann: map[string]string{"cni.projectcalico.org/ipv4pools": `["blue6"]`},
			code: uint(types.ErrInvalidNetworkConfig), mention: []string{"blue6", "IPv4"}},
		{name: "node unknown to the API", node: "node-x", ns: "ns-plain", ann: map[string]string{}, code: uint(types.ErrInvalidNetworkConfig), mention: []string{"node-x"}},
		{name: "an account without RBAC", node: "node-a", ns: "ns-plain", ann: map[string]string{}, kubeconfig: "nobody",
			code: uint(types.ErrInvalidNetworkConfig), mention: []string{"403"}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stdin := f.podConf(t, c.node, c.ipam)
			if c.kubeconfig != "" {
				stdin = f.podConf(t, c.node, merge(c.ipam, map[string]any{"kubernetes": f.kubernetes(t,
					f.srv.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-"+c.kubeconfig), c.node)}))
			}
			var p *corev1.Pod
			if c.ann != nil {
				p = f.pod(t, c.ns, idf("%s-pod-%d", mode, i), c.node, c.ann)
			}
			id := idf("sandbox-%d", i)
			out, err := cnirun.Run(ctxT(t), ipkeeperBin, podCall(id, p, stdin))
			if err != nil {
				t.Fatal(err)
			}
			if c.code != 0 {
				e := wantCNIError(t, "ADD", out, c.code)
				for _, m := range c.mention {
					if !strings.Contains(e.Msg, m) {
						t.Errorf("message %q does not name %s", e.Msg, m)
					}
				}
				t.Logf("code %d: %s", e.Code, e.Msg)
				return
			}
			got := addrsOf(t, stdin, out)
			if len(got) != len(c.want) {
				t.Fatalf("got %v, want addresses like %v", got, c.want)
			}
			for j, w := range c.want {
				if !strings.HasPrefix(got[j].String(), w) {
					t.Errorf("address %d = %v, want %s*", j, got[j], w)
				}
			}
			if p != nil { // the pod's identity is on the allocation
				cf := filepath.Join(t.TempDir(), "c.conf")
				if err := os.WriteFile(cf, stdin, 0o600); err != nil {
					t.Fatal(err)
				}
				var v struct {
					Holdings []struct {
						Handle struct{ Namespace, Pod, PodUID, Node string } `json:"handle"`
					} `json:"holdings"`
				}
				decodeJSON(t, ctl(t, cf, "ip", "show", got[0].String(), "-o", "json"), &v)
				if len(v.Holdings) != 1 || v.Holdings[0].Handle.PodUID != string(p.UID) || v.Holdings[0].Handle.Pod != p.Name ||
					v.Holdings[0].Handle.Namespace != p.Namespace || v.Holdings[0].Handle.Node != c.node {
					t.Errorf("ip show %v: %+v, want pod %s/%s UID %s on %s", got[0], v.Holdings, p.Namespace, p.Name, p.UID, c.node)
				}
			}
		})
	}
	// A pod that is gone by the time of its ADD: try again later.
	t.Run("pod gone", func(t *testing.T) {
		name := "gone-" + mode
		p := f.pod(t, "ns-plain", name, "node-a", nil)
		zero := int64(0)
		if err := f.cs.CoreV1().Pods("ns-plain").Delete(ctxT(t), name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
		if f.agents != nil {
			// The agent's cache learns of the deletion from its watch.
			f.agents.waitGone(t, "node-a", p)
		}
		out, err := cnirun.Run(ctxT(t), ipkeeperBin, podCall("sandbox-gone", p, f.podConf(t, "node-a", nil)))
		if err != nil {
			t.Fatal(err)
		}
		e := wantCNIError(t, "ADD", out, uint(types.ErrTryAgainLater))
		if !strings.Contains(e.Msg, "ns-plain/"+name) {
			t.Errorf("message %q does not name the pod", e.Msg)
		}
	})
	// STATUS resolves usePodCidr for the node too.
	t.Run("STATUS with usePodCidr", func(t *testing.T) {
		stdin := f.podConf(t, "node-a", map[string]any{"ranges": [][]map[string]any{{{"subnet": "usePodCidr"}}}})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := cnirun.Run(ctx, ipkeeperBin, cnirun.Call{Command: "STATUS", Path: toolsDir, Stdin: stdin})
		if err != nil || out.ExitCode != 0 {
			t.Fatalf("STATUS: %v\n%v", err, out)
		}
	})
}

// writeTemp writes data into a new file of t's and returns its path.
func writeTemp(t testing.TB, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "conf")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
