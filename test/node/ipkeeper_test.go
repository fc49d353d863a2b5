package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	_ "github.com/ipkeeper/ipkeeper/internal/datastore/kubeopen" // the kubernetes datastore for datastore.Open
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
)

// shippedConflist is the config list of deploy/'s ConfigMap
// ipkeeper-config, and its key (the installed file's name).
func shippedConflist(t *testing.T) (string, map[string]any) {
	t.Helper()
	dir, err := kubetest.DeployDir()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := kubetest.Manifests(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() != "ConfigMap" || o.GetName() != "ipkeeper-config" {
			continue
		}
		data, _, _ := unstructured.NestedStringMap(o.Object, "data")
		for k, v := range data {
			if strings.HasSuffix(k, ".conflist") {
				var list map[string]any
				if err := json.Unmarshal([]byte(v), &list); err != nil {
					t.Fatalf("ConfigMap ipkeeper-config %s: %v", k, err)
				}
				return k, list
			}
		}
	}
	t.Fatal("no .conflist in deploy/'s ConfigMap ipkeeper-config")
	return "", nil
}

// nodeConflist is the shipped config list as this node needs it: the
// upstream bridge as the main plugin inside the node's namespace (no
// portmap or masquerading: no iptables here), cniVersion 1.1.0 (so that
// containerd 2.x asks the plugin's STATUS), the installer's kubeconfig
// and the agent's socket at the node's paths, the node's datastore
// partition, its ranges, and the node name the installer fills in.
func (n *node) nodeConflist(t *testing.T) (string, []byte) {
	t.Helper()
	key, list := shippedConflist(t)
	plugins, _ := list["plugins"].([]any)
	if len(plugins) == 0 {
		t.Fatal("the shipped config list has no plugins")
	}
	first, _ := plugins[0].(map[string]any)
	ipamConf, _ := first["ipam"].(map[string]any)
	ds, _ := ipamConf["datastore"].(map[string]any)
	kube, _ := ipamConf["kubernetes"].(map[string]any)
	if ipamConf == nil || ds == nil || kube == nil {
		t.Fatalf("the shipped config list has no ipam.datastore or ipam.kubernetes: %v", first)
	}
	kubeconfig := n.cniConf + "/ipkeeper-kubeconfig"
	ds["kubeconfig"] = kubeconfig
	ds["prefix"] = n.name
	kube["kubeconfig"] = kubeconfig
	kube["agentSocket"] = n.agentSock
	ipamConf["ranges"] = n.opts.ranges
	ipamConf["nodeName"] = "__KUBERNETES_NODE_NAME__"
	list["cniVersion"] = "1.1.0"
	list["plugins"] = []any{map[string]any{"type": "bridge", "bridge": "ipkn0", "isGateway": !n.opts.noGateway, "ipam": ipamConf}}
	b, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return key, b
}

// install runs ipkeeper-install as the DaemonSet does, against the
// node's CNI dirs, with the ipkeeper-node ServiceAccount's token and the
// cluster's CA, once.
func (n *node) install(t *testing.T) {
	t.Helper()
	key, data := n.nodeConflist(t)
	for _, d := range []string{n.path("config"), n.path("tls")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	src := n.path("config/" + key)
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	token := n.path("sa/token")
	// A token bound to a pod on this node, as the kubelet projects into the
	// DaemonSet's pod: the node-writes policy refuses a node token without one.
	if err := os.WriteFile(token, []byte(n.srv.NodeToken(t, n.name)), 0o600); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(n.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin("ipkeeper-install"), "--once",
		"--cni-bin-dir="+n.cniBin, "--cni-conf-dir="+n.cniConf, "--host-cni-conf-dir="+n.cniConf,
		"--plugin="+bin("ipkeeper"), "--conflist="+src, "--token-file="+token, "--ca-file="+n.srv.CAFile,
		"--tls-dir="+n.path("tls"), "--node-name="+n.name)
	cmd.Env = append(os.Environ(), "KUBERNETES_SERVICE_HOST="+u.Hostname(), "KUBERNETES_SERVICE_PORT="+u.Port())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ipkeeper-install: %v\n%s", err, out)
	}
	n.conflist = n.cniConf + "/" + key
	if _, err := os.Stat(n.conflist); err != nil {
		t.Fatalf("the installer wrote no config list: %v", err)
	}
}

// startAgent runs ipkeeper-agent as the ipkeeper-node ServiceAccount,
// reaching the API server through agentProxy, and waits until its
// readiness probe passes.
func (n *node) startAgent(t *testing.T) {
	t.Helper()
	kc := n.path("agent.kubeconfig")
	n.writeTokenKubeconfig(t, kc, "https://"+n.agentProxy.Addr(), "ipkeeper-node", n.srv.NodeToken(t, n.name))
	n.agent = startProc(t, "ipkeeper-agent", n.path("agent.log"), nil,
		bin("ipkeeper-agent"), "--kubeconfig="+kc, "--node-name="+n.name, "--socket="+n.agentSock)
	n.waitFor(t, "ipkeeper-agent is ready (--probe)", 2*time.Minute, func() (bool, string) {
		if !n.agent.running() {
			t.Fatalf("ipkeeper-agent exited:\n%s", n.agent.tail(40))
		}
		out, err := exec.Command(bin("ipkeeper-agent"), "--probe", "--socket="+n.agentSock).CombinedOutput()
		return err == nil, string(out)
	})
}

// startController runs ipkeeper-controller as its ServiceAccount with
// the node's config list and waits for /readyz.
func (n *node) startController(t *testing.T) {
	t.Helper()
	kc := n.srv.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-controller")
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	n.controller = startProc(t, "ipkeeper-controller", n.path("controller.log"), nil,
		bin("ipkeeper-controller"), "--kubeconfig="+kc, "--config="+n.conflist, "--leader-elect=false",
		"--leak-grace="+n.opts.leakGrace.String(), "--resync=5s", "--metrics-addr="+addr, "--map-addr=")
	n.waitFor(t, "ipkeeper-controller serves /readyz", 2*time.Minute, func() (bool, string) {
		if !n.controller.running() {
			t.Fatalf("ipkeeper-controller exited:\n%s", n.controller.tail(40))
		}
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
}

// writeTokenKubeconfig writes a kubeconfig for token, of the kube-system
// ServiceAccount account, with the given server URL.
func (n *node) writeTokenKubeconfig(t *testing.T, path, server, account, token string) {
	t.Helper()
	ca, err := os.ReadFile(n.srv.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	c := clientcmdapi.NewConfig()
	c.Clusters["node"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	c.AuthInfos[account] = &clientcmdapi.AuthInfo{Token: token}
	c.Contexts["node"] = &clientcmdapi.Context{Cluster: "node", AuthInfo: account}
	c.CurrentContext = "node"
	if err := clientcmd.WriteToFile(*c, path); err != nil {
		t.Fatal(err)
	}
}

// handles reads every handle of the node's datastore partition as the
// admin.
func (n *node) handles(t *testing.T) []ipam.Handle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := datastore.Open(ctx, config.Datastore{Type: config.DatastoreKubernetes, Kubeconfig: n.srv.AdminKubeconfig,
		Prefix: n.name, DialTimeout: config.DefaultDialTimeout, RequestTimeout: config.DefaultRequestTimeout}, datastore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hs, err := allocator.New(s, nil).Handles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return hs
}

// ctl runs ipkeeperctl on the node's config as the admin; it returns the
// output and the exit code.
func (n *node) ctl(t *testing.T, args ...string) (string, int) {
	t.Helper()
	argv := append([]string{"--config=" + n.conflist, "--datastore-kubeconfig=" + n.srv.AdminKubeconfig, "--node=" + n.name}, args...)
	out, err := exec.Command(bin("ipkeeperctl"), argv...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("ipkeeperctl %v: %v", args, err)
	}
	return string(out), 0
}

// checkClean runs ipkeeperctl check (with the leak rules) and fails the
// test unless it finds nothing.
func (n *node) checkClean(t *testing.T) {
	t.Helper()
	if out, code := n.ctl(t, "check", "--kubeconfig="+n.srv.AdminKubeconfig); code != 0 {
		t.Errorf("ipkeeperctl check: exit %d, want 0 (nothing found):\n%s", code, out)
	}
}
