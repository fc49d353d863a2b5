package agent

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipkeeper/ipkeeper/internal/agent/agenttest"
	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/podinfo"
	"github.com/ipkeeper/ipkeeper/internal/store/kube"
)

// TestLookupRefusesPodsOfOtherNodes drives Lookup in process: a pod bound
// to another node is refused naming both nodes, whether the cache holds
// it or the API server answers for it, and so is a pod bound to no node;
// a pod of the agent's node that the cache lacks (bound a moment ago) is
// read from the API server and served.
func TestLookupRefusesPodsOfOtherNodes(t *testing.T) {
	f := fixture(t, "podnode")
	cfg, err := clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	unbound := createPod(t, srv.Client, f.ns, "unbound", "", nil)
	a := New(cs, f.nodeA, slog.New(slog.NewTextHandler(io.Discard, nil)))
	// Not started: the caches hold what the test puts in.
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	a.pods = corelisters.NewPodLister(idx)
	ctx := ctxT(t)
	far := f.pods["far-6"]
	for _, tc := range []struct {
		name, pod, uid string
		mention        []string
	}{
		{"bound to another node, read from the API server", "far-6", string(far.UID), []string{"far-6", f.nodeA, f.nodeB}},
		{"bound to another node, no UID asked", "far-6", "", []string{"far-6", f.nodeA, f.nodeB}},
		{"bound to no node", "unbound", string(unbound.UID), []string{"unbound", f.nodeA, "not bound"}},
	} {
		_, err := a.Lookup(ctx, f.ns, tc.pod, tc.uid, f.nodeA)
		if !errors.Is(err, podinfo.ErrWrongNode) {
			t.Errorf("%s: %v, want ErrWrongNode", tc.name, err)
			continue
		}
		for _, m := range tc.mention {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("%s: %q does not name %s", tc.name, err, m)
			}
		}
	}
	web := f.pods["web-4"]
	if info, err := a.Lookup(ctx, f.ns, "web-4", string(web.UID), f.nodeA); err != nil || info.Pod.UID != string(web.UID) {
		t.Errorf("a pod of the agent's node absent from the cache: %+v, %v; want it from the API server", info, err)
	}
	cached := far.DeepCopy()
	cached.Spec = corev1.PodSpec{NodeName: f.nodeB}
	if err := idx.Add(cached); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Lookup(ctx, f.ns, "far-6", string(far.UID), f.nodeA); !errors.Is(err, podinfo.ErrWrongNode) {
		t.Errorf("a cached pod bound to another node: %v, want ErrWrongNode", err)
	}
}

// cniCase is one request to an agent's /v1/cni and what must come of it.
type cniCase struct {
	name  string
	agent *agenttest.Process
	req   podinfo.CNIRequest
	// wrongNode: refused as another node's (ErrWrongNode); else code is
	// the CNI error's code.
	wrongNode bool
	code      uint
	mention   []string
}

// check sends the request and fails t unless it is refused as the case
// says.
func (c cniCase) check(t *testing.T) {
	t.Helper()
	cl := podinfo.NewAgentClient(c.agent.Socket)
	defer cl.Close()
	ans, err := cl.CNI(ctxT(t), c.req)
	var msg string
	switch {
	case c.wrongNode:
		if !errors.Is(err, podinfo.ErrWrongNode) {
			t.Fatalf("answer %s, error %v; want ErrWrongNode\nagent log:\n%s", ans.Stdout, err, c.agent.Log())
		}
		msg = err.Error()
	case err != nil:
		t.Fatalf("%v, want CNI error %d", err, c.code)
	case ans.Error == nil || ans.Error.Code != c.code:
		t.Fatalf("answer %s, error %+v; want CNI error %d\nagent log:\n%s", ans.Stdout, ans.Error, c.code, c.agent.Log())
	default:
		msg = ans.Error.Msg + " " + ans.Error.Details
	}
	for _, m := range c.mention {
		if !strings.Contains(msg, m) {
			t.Errorf("%q does not name %s", msg, m)
		}
	}
}

// cniConf is a network config of node on the kubernetes datastore's
// partition prefix whose pod-aware lookups go to the agent at socket;
// fields of ipam are replaced or added by set (a nil value removes one),
// and top-level keys by top.
func cniConf(t *testing.T, cniVersion, node, prefix, socket string, set, top map[string]any) []byte {
	t.Helper()
	ipamConf := map[string]any{"type": "ipkeeper", "nodeName": node,
		"datastore":  map[string]any{"type": "kubernetes", "prefix": prefix},
		"kubernetes": map[string]any{"agentSocket": socket},
		"ranges":     []any{[]any{map[string]any{"subnet": "10.80.0.0/24"}}}}
	for k, v := range set {
		if v == nil {
			delete(ipamConf, k)
		} else {
			ipamConf[k] = v
		}
	}
	conf := map[string]any{"cniVersion": cniVersion, "name": "net1", "type": "bridge", "ipam": ipamConf}
	for k, v := range top {
		conf[k] = v
	}
	b, err := json.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// storeSnapshot is every object of the kubernetes datastore (all
// partitions) as "resource/name" → resourceVersion.
func storeSnapshot(t *testing.T) map[string]string {
	t.Helper()
	dc, err := dynamic.NewForConfig(srv.Config)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, r := range []string{kube.ResourcePools, kube.ResourceBlocks, kube.ResourceNodes} {
		l, err := dc.Resource(schema.GroupVersionResource{Group: kube.Group, Version: kube.Version, Resource: r}).List(ctxT(t), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range l.Items {
			out[r+"/"+o.GetName()] = o.GetResourceVersion()
		}
	}
	return out
}

// TestAgentCNIChecks runs node A's and node B's agents (real processes,
// the node ServiceAccount's RBAC) and sends node A's agent, on /v1/cni,
// every request it must refuse before its verb reads the API server or
// opens a store: input the plugin refuses (with the plugin's code),
// another node's ADD, DEL, CHECK, GC and STATUS (while node B holds an
// address), an ADD for a pod bound to another node, a config that names
// no agent socket, and local and etcd datastores. The refused requests
// change nothing in the store, create nothing at the local path they name
// and never connect to the etcd endpoint; afterwards the agent serves
// an ADD for its own node's pod.
func TestAgentCNIChecks(t *testing.T) {
	f := fixture(t, "cni")
	// Each agent runs with its node's credentials (a token bound to a pod
	// on it), as the DaemonSet's do: node writes policy applies.
	a := agenttest.Start(t, agentBin, srv.NodeKubeconfig(t, f.nodeA), f.nodeA, true)
	b := agenttest.Start(t, agentBin, srv.NodeKubeconfig(t, f.nodeB), f.nodeB, true)
	prefix := f.ns
	confA := func(ver string, set, top map[string]any) []byte {
		return cniConf(t, ver, f.nodeA, prefix, a.Socket, set, top)
	}
	confB := func(ver string, top map[string]any) []byte {
		return cniConf(t, ver, f.nodeB, prefix, b.Socket, nil, top)
	}
	noList := map[string]any{"cni.dev/valid-attachments": []any{}}
	req := func(command, id string, stdin []byte) podinfo.CNIRequest {
		r := podinfo.CNIRequest{Command: command, Path: "/opt/cni/bin", Stdin: stdin}
		if command == "ADD" || command == "DEL" || command == "CHECK" {
			r.ContainerID, r.IfName = id, "eth0"
		}
		if command == "ADD" || command == "CHECK" {
			r.NetNS = "/var/run/netns/ipk-absent-" + id
		}
		return r
	}
	with := func(r podinfo.CNIRequest, change func(*podinfo.CNIRequest)) podinfo.CNIRequest {
		change(&r)
		return r
	}
	podArgs := func(pod *corev1.Pod) string {
		return "K8S_POD_NAMESPACE=" + pod.Namespace + ";K8S_POD_NAME=" + pod.Name + ";K8S_POD_UID=" + string(pod.UID)
	}

	// A pod of node B in namespace default, which names no pools: an ADD
	// for it on node A would succeed but for the check of its node.
	far := createPod(t, srv.Client, "default", "far-"+f.ns, f.nodeB, nil)
	// Node B holds an address, which another node's DEL or GC would
	// release.
	seed := podinfo.NewAgentClient(b.Socket)
	defer seed.Close()
	if ans, err := seed.CNI(ctxT(t), req("ADD", "b1", confB("1.1.0", nil))); err != nil || ans.Error != nil {
		t.Fatalf("node B's ADD through its agent: %+v, %v\n%s", ans.Error, err, b.Log())
	}
	before := storeSnapshot(t)

	localPath := filepath.Join(t.TempDir(), "store")
	etcd, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	var dialed atomic.Int32
	go func() {
		for {
			c, err := etcd.Accept()
			if err != nil {
				return
			}
			dialed.Add(1)
			c.Close()
		}
	}()
	const (
		codeVersion = types.ErrIncompatibleCNIVersion
		codeEnv     = types.ErrInvalidEnvironmentVariables
		codeConfig  = types.ErrInvalidNetworkConfig
	)
	add := req("ADD", "a1", confA("1.1.0", nil, nil))
	cases := []cniCase{
		// The plugin's input checks, with the plugin's codes.
		{name: "container ID a/b", req: with(add, func(r *podinfo.CNIRequest) { r.ContainerID = "a/b" }), code: codeEnv, mention: []string{"a/b"}},
		{name: "no container ID", req: with(add, func(r *podinfo.CNIRequest) { r.ContainerID = "" }), code: codeEnv, mention: []string{"CNI_CONTAINERID"}},
		{name: "container ID of 254 bytes", req: with(add, func(r *podinfo.CNIRequest) { r.ContainerID = strings.Repeat("c", 254) }), code: codeEnv, mention: []string{"CNI_CONTAINERID"}},
		{name: "interface a/b", req: with(add, func(r *podinfo.CNIRequest) { r.IfName = "a/b" }), code: codeEnv, mention: []string{"interface name"}},
		{name: "interface of 16 bytes", req: with(add, func(r *podinfo.CNIRequest) { r.IfName = strings.Repeat("e", 16) }), code: codeEnv, mention: []string{"interface name"}},
		{name: "no netns", req: with(add, func(r *podinfo.CNIRequest) { r.NetNS = "" }), code: codeEnv, mention: []string{"CNI_NETNS"}},
		{name: "netns a directory", req: with(add, func(r *podinfo.CNIRequest) { r.NetNS = t.TempDir() }), code: codeEnv, mention: []string{"CNI_NETNS", "directory"}},
		{name: "no CNI_PATH", req: with(add, func(r *podinfo.CNIRequest) { r.Path = "" }), code: codeEnv, mention: []string{"CNI_PATH"}},
		{name: "CNI_ARGS not KEY=VALUE", req: with(add, func(r *podinfo.CNIRequest) { r.Args = "K8S_POD_NAME" }), code: codeEnv, mention: []string{"CNI_ARGS"}},
		{name: "network name a/b", req: req("ADD", "a1", confA("1.1.0", nil, map[string]any{"name": "a/b"})), code: codeConfig, mention: []string{"network name"}},
		{name: "cniVersion 9.9.9", req: req("ADD", "a1", confA("9.9.9", nil, nil)), code: codeVersion},
		{name: "DEL container ID ../a1", req: with(req("DEL", "a1", confA("1.1.0", nil, nil)), func(r *podinfo.CNIRequest) { r.ContainerID = "../a1" }), code: codeEnv, mention: []string{"../a1"}},
		{name: "GC of cniVersion 1.0.0", req: req("GC", "", confA("1.0.0", nil, noList)), code: codeVersion, mention: []string{"GC"}},
		{name: "GC without a list of valid attachments", req: req("GC", "", confA("1.1.0", nil, nil)), code: codeConfig, mention: []string{"cni.dev/valid-attachments"}},
		{name: "CHECK of cniVersion 0.3.1", req: req("CHECK", "a1", confA("0.3.1", nil, nil)), code: codeVersion, mention: []string{"CHECK"}},
		{name: "unknown command", req: req("VERSION", "a1", confA("1.1.0", nil, nil)), code: codeEnv, mention: []string{"VERSION"}},
		// Another node's config, every verb.
		{name: "another node's ADD", req: req("ADD", "b2", confB("1.1.0", nil)), wrongNode: true, mention: []string{f.nodeA, f.nodeB}},
		{name: "another node's DEL", req: req("DEL", "b1", confB("1.1.0", nil)), wrongNode: true, mention: []string{f.nodeA, f.nodeB}},
		{name: "another node's CHECK", req: req("CHECK", "b1", confB("1.1.0", nil)), wrongNode: true, mention: []string{f.nodeA, f.nodeB}},
		{name: "another node's GC", req: req("GC", "", confB("1.1.0", noList)), wrongNode: true, mention: []string{f.nodeA, f.nodeB}},
		{name: "another node's STATUS", req: req("STATUS", "", confB("1.1.0", nil)), wrongNode: true, mention: []string{f.nodeA, f.nodeB}},
		// A pod bound to another node, in this node's config.
		{name: "ADD of a pod bound to another node", req: with(add, func(r *podinfo.CNIRequest) { r.Args = podArgs(far) }),
			code: codeConfig, mention: []string{far.Name, f.nodeA, f.nodeB}},
		// Configs the agent does not serve.
		{name: "no agent socket", req: with(add, func(r *podinfo.CNIRequest) {
			r.Args, r.Stdin = podArgs(far), confA("1.1.0", map[string]any{"kubernetes": nil}, nil)
		}), code: codeConfig, mention: []string{"agentSocket"}},
		{name: "local datastore", req: req("ADD", "a1", confA("1.1.0", map[string]any{"datastore": map[string]any{"type": "local", "path": localPath}}, nil)),
			code: codeConfig, mention: []string{`"local"`, "kubernetes"}},
		{name: "etcd datastore", req: req("ADD", "a1", confA("1.1.0", map[string]any{"datastore": map[string]any{"type": "etcd",
			"endpoints": []string{etcd.Addr().String()}, "dialTimeout": "1s", "requestTimeout": "1s"}}, nil)),
			code: codeConfig, mention: []string{`"etcd"`}},
		{name: "etcd datastore DEL", req: req("DEL", "a1", confA("1.1.0", map[string]any{"datastore": map[string]any{"type": "etcd",
			"endpoints": []string{etcd.Addr().String()}, "dialTimeout": "1s", "requestTimeout": "1s"}}, nil)),
			code: codeConfig, mention: []string{`"etcd"`}},
	}
	for _, c := range cases {
		c.agent = a
		t.Run(c.name, c.check)
	}

	t.Run("refused requests changed nothing", func(t *testing.T) {
		after := storeSnapshot(t)
		if !maps.Equal(before, after) {
			t.Errorf("the store changed:\nbefore %v\nafter  %v", before, after)
		}
		if _, ok := after[kube.ResourceNodes+"/"+prefix+"."+f.nodeA]; ok {
			t.Errorf("node A has a node object: %v", after)
		}
		st, err := kube.NewForConfig(srv.Config, prefix)
		if err != nil {
			t.Fatal(err)
		}
		hs, err := allocator.New(st, nil).NodeHandles(ctxT(t), f.nodeB)
		if err != nil || len(hs) != 1 || hs[0].ContainerID != "b1" {
			t.Errorf("node B's handles: %+v, %v; want b1's", hs, err)
		}
		if _, err := os.Lstat(localPath); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s was created: %v", localPath, err)
		}
		if n := dialed.Load(); n != 0 {
			t.Errorf("the agent connected to the etcd endpoint %d times", n)
		}
	})

	t.Run("its own node's pod is served", func(t *testing.T) {
		cl := podinfo.NewAgentClient(a.Socket)
		defer cl.Close()
		// In namespace default, which names no pools; just bound, as a
		// kubelet's ADD comes: the cache may lack it yet.
		pod := createPod(t, srv.Client, "default", "own-"+f.ns, f.nodeA, nil)
		ans, err := cl.CNI(ctxT(t), with(add, func(r *podinfo.CNIRequest) { r.Args = podArgs(pod) }))
		if err != nil || ans.Error != nil || !strings.Contains(string(ans.Stdout), "10.80.0.") {
			t.Errorf("ADD of %s: %s, %+v, %v\n%s", pod.Name, ans.Stdout, ans.Error, err, a.Log())
		}
	})
}
