package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	_ "github.com/ipkeeper/ipkeeper/internal/datastore/kubeopen" // the kubernetes datastore
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/test/e2e/cnirun"
)

// cluster is one test's corner of the API server: its namespace, and
// nodes named after it.
type cluster struct {
	t      *testing.T
	client kubernetes.Interface
	ns     string
}

func newCluster(t *testing.T, s *kubetest.Server) *cluster {
	t.Helper()
	c := &cluster{t: t, client: s.Client, ns: strings.ToLower(fmt.Sprintf("c%d", time.Now().UnixNano()%1e9))}
	if _, err := c.client.CoreV1().Namespaces().Create(ctxT(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return c
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// node creates a Node named after the test and returns its name.
func (c *cluster) node(name string) string {
	c.t.Helper()
	full := c.ns + "-" + name
	if _, err := c.client.CoreV1().Nodes().Create(ctxT(c.t), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: full}}, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = c.client.CoreV1().Nodes().Delete(context.Background(), full, metav1.DeleteOptions{}) })
	return full
}

func (c *cluster) deleteNode(name string) {
	c.t.Helper()
	if err := c.client.CoreV1().Nodes().Delete(ctxT(c.t), name, metav1.DeleteOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// pod creates a running pod bound to node and returns its UID.
func (c *cluster) pod(name, node string) string {
	c.t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.ns},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}
	p, err := c.client.CoreV1().Pods(c.ns).Create(ctxT(c.t), p, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	c.status(name, corev1.PodRunning)
	return string(p.UID)
}

// status sets a pod's phase and addresses, as its kubelet would.
func (c *cluster) status(name string, phase corev1.PodPhase, ips ...netip.Addr) {
	c.t.Helper()
	p, err := c.client.CoreV1().Pods(c.ns).Get(ctxT(c.t), name, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	p.Status.Phase, p.Status.PodIP, p.Status.PodIPs = phase, "", nil
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip.String()})
	}
	if len(ips) > 0 {
		p.Status.PodIP = ips[0].String()
	}
	if _, err := c.client.CoreV1().Pods(c.ns).UpdateStatus(ctxT(c.t), p, metav1.UpdateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// deletePod deletes a pod with grace period 0 (gone at once, no DEL).
func (c *cluster) deletePod(name string) {
	c.t.Helper()
	zero := int64(0)
	err := c.client.CoreV1().Pods(c.ns).Delete(ctxT(c.t), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if err != nil && !apierrors.IsNotFound(err) {
		c.t.Fatal(err)
	}
}

// network is a CNI network config using ipkeeper with a local store, or a
// partition of the kubernetes datastore.
type network struct {
	t    *testing.T
	conf []byte
	dir  string           // the local store
	ds   config.Datastore // the plugin's datastore, also the test's
}

// newNetwork returns a network named name whose ipam is ipam plus a local
// datastore in a temp dir.
func newNetwork(t *testing.T, name string, ipam map[string]any) *network {
	t.Helper()
	n := &network{t: t, dir: t.TempDir()}
	n.ds = config.Datastore{Type: config.DatastoreLocal, Path: n.dir}
	ipam["type"] = "ipkeeper"
	ipam["datastore"] = map[string]any{"type": "local", "path": n.dir}
	conf := map[string]any{"cniVersion": "1.0.0", "name": name, "type": "bridge", "ipam": ipam}
	var err error
	if n.conf, err = json.Marshal(conf); err != nil {
		t.Fatal(err)
	}
	return n
}

// nadNetwork is the production NetworkAttachmentDefinition's config
// (whereabouts, exactly five usable addresses) with ipkeeper as the IPAM
// type and an explicit local datastore.
func nadNetwork(t *testing.T) *network {
	t.Helper()
	dir := t.TempDir()
	return nadNetworkOn(t, config.Datastore{Type: config.DatastoreLocal, Path: dir})
}

// nadNetworkOn is nadNetwork on datastore ds (local or kubernetes).
func nadNetworkOn(t *testing.T, ds config.Datastore) *network {
	t.Helper()
	root, err := cnirun.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "internal", "importer", "testdata", "network-attachment-definition.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var nad struct {
		Metadata struct{ Name, Namespace string } `json:"metadata"`
		Spec     struct {
			Config string `json:"config"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &nad); err != nil {
		t.Fatal(err)
	}
	var conf map[string]any
	if err := json.Unmarshal([]byte(nad.Spec.Config), &conf); err != nil {
		t.Fatal(err)
	}
	if conf["name"] == nil {
		conf["name"] = nad.Metadata.Name // Multus names it after the NAD
	}
	n := &network{t: t, dir: ds.Path, ds: ds}
	ipam := conf["ipam"].(map[string]any)
	if ipam["type"] != "whereabouts" {
		t.Fatalf("the NAD's ipam type is %v, not whereabouts", ipam["type"])
	}
	ipam["type"] = "ipkeeper"
	switch ds.Type {
	case config.DatastoreLocal:
		ipam["datastore"] = map[string]any{"type": "local", "path": ds.Path}
	case config.DatastoreKubernetes:
		ipam["datastore"] = map[string]any{"type": "kubernetes", "kubeconfig": ds.Kubeconfig, "prefix": ds.Prefix}
	default:
		t.Fatalf("nadNetworkOn: datastore type %q", ds.Type)
	}
	if n.conf, err = json.Marshal(conf); err != nil {
		t.Fatal(err)
	}
	return n
}

// env is the controller's datastore environment: a kubernetes datastore's
// partition, with the controller's own kubeconfig.
func (n *network) env() []string {
	if n.ds.Type == config.DatastoreKubernetes {
		return []string{"IPKEEPER_DATASTORE=kubernetes", "IPKEEPER_DATASTORE_PREFIX=" + n.ds.Prefix}
	}
	return []string{"IPKEEPER_LOCAL_PATH=" + n.dir}
}

// ctlEnv is ipkeeperctl's: the controller's, with the plugin's kubeconfig
// for a kubernetes datastore.
func (n *network) ctlEnv() []string {
	if n.ds.Type == config.DatastoreKubernetes {
		return append(n.env(), "IPKEEPER_DATASTORE_KUBECONFIG="+n.ds.Kubeconfig)
	}
	return n.env()
}

// anyNetNS is CNI_NETNS for direct IPAM calls: the plugin never enters it,
// and a path that does not exist passes its check.
const anyNetNS = "/run/netns/ipk-controller-never-entered"

// add runs the plugin's ADD for a pod's container on node, with the
// CNI_ARGS a kubelet passes; it returns the output (check ExitCode).
func (n *network) add(node, ns, pod, uid, container string) cnirun.Output {
	n.t.Helper()
	out, err := cnirun.Run(ctxT(n.t), pluginBin, cnirun.Call{
		Command: "ADD", ContainerID: container, NetNS: anyNetNS, IfName: "eth0", Path: "/opt/cni/bin", Stdin: n.conf,
		Args: fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_INFRA_CONTAINER_ID=%s;K8S_POD_UID=%s", ns, pod, container, uid),
		Env:  []string{"NODENAME=" + node},
	})
	if err != nil {
		n.t.Fatalf("ADD %s: %v", container, err)
	}
	return out
}

// mustAdd runs ADD and returns the address it gave.
func (n *network) mustAdd(node, ns, pod, uid, container string) netip.Addr {
	n.t.Helper()
	out := n.add(node, ns, pod, uid, container)
	if out.ExitCode != 0 {
		n.t.Fatalf("ADD %s/%s (%s) on %s failed:\n%v", ns, pod, container, node, out)
	}
	return resultAddr(n.t, out.Stdout)
}

func resultAddr(t *testing.T, stdout []byte) netip.Addr {
	t.Helper()
	var res struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal(stdout, &res); err != nil || len(res.IPs) == 0 {
		t.Fatalf("result without addresses (%v): %s", err, stdout)
	}
	p, err := netip.ParsePrefix(res.IPs[0].Address)
	if err != nil {
		t.Fatal(err)
	}
	return p.Addr()
}

// ctl runs ipkeeperctl on the network's store and returns stdout, stderr
// and the exit status.
func (n *network) ctl(args ...string) (string, string, int) {
	n.t.Helper()
	cmd := exec.CommandContext(ctxT(n.t), ctlBin, args...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "NODENAME=ctl-node"}, n.ctlEnv()...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		n.t.Fatalf("ipkeeperctl %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// handles returns the stored handles by container ID, read with the
// allocator (the store's lock waits for a controller's pass).
func (n *network) handles() map[string]ipam.Handle {
	n.t.Helper()
	out := map[string]ipam.Handle{}
	n.withAllocator(func(a *allocator.Allocator) {
		hs, err := a.Handles(ctxT(n.t))
		if err != nil {
			n.t.Fatal(err)
		}
		for _, h := range hs {
			out[h.ContainerID] = h
		}
	})
	return out
}

// withAllocator runs f on the network's store, opened for f only.
func (n *network) withAllocator(f func(a *allocator.Allocator)) {
	n.t.Helper()
	st, err := datastore.Open(ctxT(n.t), n.ds, datastore.Options{})
	if err != nil {
		n.t.Fatal(err)
	}
	defer st.Close()
	f(allocator.New(st, nil))
}
