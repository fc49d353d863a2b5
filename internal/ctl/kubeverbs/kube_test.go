// Package kubeverbs_test runs the real ipkeeperctl binary's verbs against
// the kubernetes datastore on a real kube-apiserver with the shipped CRDs
// and RBAC. It is a package of its own because the API server's test
// harness links an etcd server, which makes a test binary slow to build.
package kubeverbs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	_ "github.com/ipkeeper/ipkeeper/internal/datastore/kubeopen"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/leaks"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/testenv"
)

const testdata = "../../importer/testdata/"

// ctlBin is the real binary, built once in TestMain.
var ctlBin string

func TestMain(m *testing.M) {
	dir, remove, err := testenv.BuildCommands("./cmd/ipkeeperctl")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctlBin = filepath.Join(dir, "ipkeeperctl")
	code := m.Run()
	remove()
	os.Exit(code)
}

// kubeEnv runs ipkeeperctl on one partition of the kubernetes datastore.
type kubeEnv struct {
	t   *testing.T
	env []string
}

func (k *kubeEnv) run(args ...string) (string, string, int) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ctlBin, args...)
	cmd.Env = k.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		k.t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// exit runs ipkeeperctl, wants exit status want and returns stdout and
// stderr.
func (k *kubeEnv) exit(want int, args ...string) (string, string) {
	k.t.Helper()
	out, errs, code := k.run(args...)
	if code != want {
		k.t.Fatalf("ipkeeperctl %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, want, out, errs)
	}
	return out, errs
}

// json runs ipkeeperctl with -o json, wants exit status 0 and decodes
// its output into v.
func (k *kubeEnv) json(v any, args ...string) {
	k.t.Helper()
	out, _ := k.exit(0, append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		k.t.Fatalf("ipkeeperctl %s -o json: %v\n%s", strings.Join(args, " "), err, out)
	}
}

type showOut struct {
	Pools []struct {
		Name  string `json:"name"`
		InUse int    `json:"inUse"`
		Total int    `json:"total"`
		Free  int    `json:"free"`
	} `json:"pools"`
	Blocks []struct {
		CIDR  string `json:"cidr"`
		Pool  string `json:"pool"`
		Node  string `json:"node"`
		InUse int    `json:"inUse"`
	} `json:"blocks"`
	Nodes []struct {
		Node  string `json:"node"`
		InUse int    `json:"inUse"`
	} `json:"nodes"`
}

type ipOut struct {
	Holdings []struct {
		State    string `json:"state"`
		HandleID string `json:"handleID"`
		Handle   *struct {
			Pod  string `json:"pod"`
			Node string `json:"node"`
		} `json:"handle"`
	} `json:"holdings"`
}

type blockOut struct {
	Blocks []struct {
		Node        string `json:"node"`
		InUse       int    `json:"inUse"`
		Allocations []struct {
			Addr   string `json:"addr"`
			Handle string `json:"handle"`
		} `json:"allocations"`
	} `json:"blocks"`
}

type leaksOut struct {
	Leaks []struct {
		Handle string `json:"handle"`
		Reason string `json:"reason"`
	} `json:"leaks"`
}

// TestVerbsOnKubernetes runs every verb of the real binary against the
// kubernetes datastore with the controller's ServiceAccount (the shipped
// RBAC: ipkeeper-datastore for the CRDs, ipkeeper-controller for pods and
// nodes), the datastore chosen by IPKEEPER_DATASTORE*: pool add, list and
// rm; show --blocks --nodes; ip show; ip release with and without --force
// and --kubeconfig; block show; leaks and check against the API; gc with
// the namespaces of the handles' containers as files; check and check
// --repair after a claim is deleted behind its back; leaks --release;
// import whereabouts and import calico of the real production state;
// -o yaml.
func TestVerbsOnKubernetes(t *testing.T) {
	srv := kubetest.Start(t)
	ctx := t.Context()
	sa := srv.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-controller")
	ds := config.Datastore{Type: config.DatastoreKubernetes, Kubeconfig: sa, Prefix: "ctl-verbs",
		DialTimeout: config.DefaultDialTimeout, RequestTimeout: config.DefaultRequestTimeout}
	sandboxes := t.TempDir()
	k := &kubeEnv{t: t, env: append(os.Environ(), "IPKEEPER_DATASTORE=kubernetes", "IPKEEPER_DATASTORE_KUBECONFIG="+sa,
		"IPKEEPER_DATASTORE_PREFIX="+ds.Prefix, "NODENAME=node-a")}

	k.exit(0, "pool", "add", "p4", "--cidr", "10.60.0.0/24", "--block-size", "28")
	k.exit(0, "pool", "add", "p6", "--cidr", "fd60::/120", "--block-size", "124")
	var pools struct {
		Pools []struct {
			Name      string `json:"name"`
			BlockSize int    `json:"blockSize"`
		} `json:"pools"`
	}
	k.json(&pools, "pool", "list")
	if len(pools.Pools) != 2 || pools.Pools[0].Name != "p4" || pools.Pools[1].BlockSize != 124 {
		t.Fatalf("pool list: %+v", pools)
	}
	k.exit(1, "pool", "add", "p4b", "--cidr", "10.60.0.128/25")

	// The cluster: two nodes, one live pod.
	for _, n := range []string{"node-a", "node-b"} {
		if _, err := srv.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod, err := srv.Client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-live"},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "c", Image: "none"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Allocations as the plugin makes them, through the typed store.
	st, err := datastore.Open(ctx, ds, datastore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a := allocator.New(st, nil)
	live, other := filepath.Join(sandboxes, "live"), filepath.Join(sandboxes, "other")
	for _, p := range []string{live, other} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	addrs := map[string][]string{}
	for _, r := range []allocator.Request{
		{Handle: ipam.Handle{ID: "net.live.eth0", Network: "net", ContainerID: "live", IfName: "eth0", Node: "node-a", NetNS: live,
			Namespace: "default", Pod: "web-live", PodUID: string(pod.UID)}, Sets: [][]string{{"p4"}, {"p6"}}},
		{Handle: ipam.Handle{ID: "net.dead.eth0", Network: "net", ContainerID: "dead", IfName: "eth0", Node: "node-a",
			NetNS: filepath.Join(sandboxes, "dead"), Namespace: "default", Pod: "web-dead", PodUID: "uid-dead"}, Sets: [][]string{{"p4"}, {"p6"}}},
		{Handle: ipam.Handle{ID: "net.other.eth0", Network: "net", ContainerID: "other", IfName: "eth0", Node: "node-b", NetNS: other,
			Namespace: "default", Pod: "gone", PodUID: "uid-gone"}, Sets: [][]string{{"p4"}}},
	} {
		h, err := a.Allocate(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		for _, ip := range h.IPs {
			addrs[h.ID] = append(addrs[h.ID], ip.Addr.String())
		}
	}

	var show showOut
	k.json(&show, "show", "--blocks", "--nodes")
	if len(show.Pools) != 2 || show.Pools[0].InUse != 3 || show.Pools[0].Total != 254 || show.Pools[0].Free != 251 ||
		show.Pools[1].InUse != 2 || len(show.Blocks) != 3 || len(show.Nodes) != 2 || show.Nodes[0].InUse != 4 {
		t.Fatalf("show: %+v", show)
	}
	var ip ipOut
	k.json(&ip, "ip", "show", addrs["net.live.eth0"][1])
	if len(ip.Holdings) != 1 || ip.Holdings[0].HandleID != "net.live.eth0" || ip.Holdings[0].Handle == nil || ip.Holdings[0].Handle.Pod != "web-live" {
		t.Fatalf("ip show: %+v", ip)
	}
	var blk blockOut
	k.json(&blk, "block", "show", "10.60.0.0/28")
	if len(blk.Blocks) != 1 || blk.Blocks[0].Node != "node-a" || blk.Blocks[0].InUse != 2 || blk.Blocks[0].Allocations[1].Handle != "net.dead.eth0" {
		t.Fatalf("block show: %+v", blk)
	}

	// Leaks against the API (the controller's ServiceAccount lists pods
	// and nodes): the two handles whose pods do not exist.
	var lk leaksOut
	k.json(&lk, "leaks", "--kubeconfig", sa)
	if len(lk.Leaks) != 2 || lk.Leaks[0].Handle != "net.dead.eth0" || lk.Leaks[1].Handle != "net.other.eth0" || lk.Leaks[0].Reason != string(leaks.PodGone) {
		t.Fatalf("leaks: %+v", lk)
	}
	k.exit(2, "check", "--kubeconfig", sa)
	// ip release: the live pod's address is refused, with or without the
	// API; node-b's is judged by the API, where its pod is gone.
	_, errs := k.exit(1, "ip", "release", addrs["net.live.eth0"][0])
	if !strings.Contains(errs, "still exists") {
		t.Fatalf("release of a live address: %s", errs)
	}
	if _, errs := k.exit(1, "ip", "release", addrs["net.live.eth0"][0], "--kubeconfig", sa); !strings.Contains(errs, "live in the Kubernetes API") {
		t.Fatalf("release of a live pod's address: %s", errs)
	}
	k.exit(1, "ip", "release", addrs["net.other.eth0"][0])
	k.exit(0, "ip", "release", addrs["net.other.eth0"][0], "--kubeconfig", sa)
	k.exit(0, "ip", "release", addrs["net.live.eth0"][1], "--force")

	// gc: node-a's dead container (its namespace is gone) is released and
	// the block node-a claimed without holding it (a plugin killed after
	// its claim) is adopted; check is then clean.
	if _, err := st.CreateClaim(ctx, store.Claim{BlockRef: store.BlockRef{Pool: "p4", CIDR: netip.MustParsePrefix("10.60.0.32/28")}, Node: "node-a"}); err != nil {
		t.Fatal(err)
	}
	k.exit(2, "check")
	var gc struct {
		Released []struct {
			Handle string   `json:"handle"`
			Addrs  []string `json:"addrs"`
		} `json:"released"`
		Kept    int      `json:"kept"`
		Adopted []string `json:"adopted"`
	}
	k.json(&gc, "gc")
	if len(gc.Released) != 1 || gc.Released[0].Handle != "net.dead.eth0" || !slices.Equal(gc.Released[0].Addrs, addrs["net.dead.eth0"]) ||
		gc.Kept != 1 || !slices.Equal(gc.Adopted, []string{"p4/10.60.0.32/28"}) {
		t.Fatalf("gc: %+v", gc)
	}
	lk = leaksOut{}
	k.json(&lk, "leaks", "--kubeconfig", sa)
	if len(lk.Leaks) != 0 {
		t.Fatalf("leaks after gc: %+v", lk)
	}
	k.exit(0, "check", "--kubeconfig", sa)

	// A claim whose block no node object holds (an ADD killed after its
	// claim): check finds it, --repair adds the block, empty, to the
	// object of the node it names. (A block without a claim cannot be
	// made here: the claim's IPAMBlock holds the block's state.)
	c := store.Claim{BlockRef: store.BlockRef{Pool: "p4", CIDR: netip.MustParsePrefix("10.60.0.64/28")}, Node: "node-a"}
	if _, err := st.CreateClaim(ctx, c); err != nil {
		t.Fatal(err)
	}
	out, _ := k.exit(2, "check", "-o", "json")
	if !strings.Contains(out, `"claim-without-block"`) {
		t.Fatalf("check: %s", out)
	}
	k.exit(3, "check", "--repair")
	k.exit(0, "check")
	if n, err := st.GetNode(ctx, "node-a"); err != nil {
		t.Fatal(err)
	} else if _, held := n.Block(c.BlockRef); !held {
		t.Fatalf("node-a's object after repair: %+v; want it holding %s", n.Blocks, c.BlockRef)
	}

	// leaks --release releases a leaked allocation (its pod is gone) as it
	// was read.
	gone, err := a.Allocate(ctx, allocator.Request{Handle: ipam.Handle{ID: "net.gone2.eth0", Network: "net", ContainerID: "gone2", IfName: "eth0",
		Node: "node-b", Namespace: "default", Pod: "gone2", PodUID: "uid-gone2"}, Sets: [][]string{{"p4"}, {"p6"}}})
	if err != nil {
		t.Fatal(err)
	}
	var rel struct {
		Leaks []struct {
			Handle string   `json:"handle"`
			Result string   `json:"result"`
			Addrs  []string `json:"addrs"`
		} `json:"leaks"`
	}
	// A sticky allocation whose pod is gone is not a leak: its addresses
	// stay with its identity (the controller parks it).
	sticky, err := a.AllocateSticky(ctx, allocator.Request{Handle: ipam.Handle{ID: "net.gone3.eth0", Network: "net", ContainerID: "gone3", IfName: "eth0",
		Node: "node-b", Namespace: "default", Pod: "db-0", PodUID: "uid-gone3", Sticky: "pod/default/db-0"}, Sets: [][]string{{"p4"}, {"p6"}}})
	if err != nil {
		t.Fatal(err)
	}
	k.json(&rel, "leaks", "--kubeconfig", sa, "--release")
	if len(rel.Leaks) != 1 || rel.Leaks[0].Handle != gone.ID || rel.Leaks[0].Result != "released" || len(rel.Leaks[0].Addrs) != 2 {
		t.Fatalf("leaks --release: %+v; want only %s released", rel, gone.ID)
	}
	for _, h := range sticky.IPs {
		ip = ipOut{}
		k.json(&ip, "ip", "show", h.Addr.String())
		if len(ip.Holdings) != 1 || ip.Holdings[0].State != "allocated" {
			t.Fatalf("ip show %s of the sticky allocation after leaks --release: %+v", h.Addr, ip)
		}
	}
	if _, err := a.Release(ctx, "node-b", sticky.ID); err != nil {
		t.Fatal(err)
	}
	for _, h := range gone.IPs {
		ip = ipOut{}
		k.json(&ip, "ip", "show", h.Addr.String())
		if len(ip.Holdings) != 1 || ip.Holdings[0].State != "free" {
			t.Fatalf("ip show %s after leaks --release: %+v", h.Addr, ip)
		}
	}
	k.exit(0, "check", "--kubeconfig", sa)

	// Imports of the real production state.
	k.exit(0, "import", "whereabouts", "--file", testdata+"whereabouts-ippools.yaml", "--file", testdata+"network-attachment-definition.yaml")
	ip = ipOut{}
	k.json(&ip, "ip", "show", "172.18.178.199")
	if len(ip.Holdings) != 1 || ip.Holdings[0].State != "allocated" || ip.Holdings[0].Handle == nil || ip.Holdings[0].Handle.Node != "" {
		t.Fatalf("ip show of a whereabouts allocation: %+v", ip)
	}
	k.exit(0, "import", "calico", "--file", testdata+"calico-block-100.112.209.128-26.json")
	blk = blockOut{}
	k.json(&blk, "block", "show", "100.112.209.128/26")
	if len(blk.Blocks) != 1 || blk.Blocks[0].Node != "ip-10-200-205-203" || blk.Blocks[0].InUse != 9 {
		t.Fatalf("block show of the Calico block: %+v", blk)
	}
	var imp struct {
		Changes []struct {
			Status string `json:"status"`
		} `json:"changes"`
	}
	k.json(&imp, "import", "calico", "--file", testdata+"calico-block-100.112.209.128-26.json")
	for _, ch := range imp.Changes {
		if ch.Status != "present" {
			t.Fatalf("second calico import: %+v", imp)
		}
	}
	k.exit(0, "check")
	ym, _ := k.exit(0, "show", "--blocks", "-o", "yaml")
	var fromYAML showOut
	if err := yaml.Unmarshal([]byte(ym), &fromYAML); err != nil || len(fromYAML.Pools) != 4 {
		t.Fatalf("show -o yaml: %+v %v\n%s", fromYAML, err, ym)
	}

	if _, errs := k.exit(1, "pool", "rm", "p4"); !strings.Contains(errs, "in use") {
		t.Fatalf("pool rm of a pool in use: %s", errs)
	}
	// An interrupted pool rm (the pool left marked): check reports it,
	// pool rm --cancel keeps the pool.
	p4, err := st.GetPool(ctx, "p4")
	if err != nil {
		t.Fatal(err)
	}
	p4.Spec.Deleting = true
	if _, err := st.UpdatePool(ctx, p4); err != nil {
		t.Fatal(err)
	}
	if out, _ := k.exit(2, "check", "--repair"); !strings.Contains(out, "pool-deleting") {
		t.Fatalf("check of a pool left marked: %s", out)
	}
	var kept struct {
		WasBeingRemoved bool `json:"wasBeingRemoved"`
	}
	k.json(&kept, "pool", "rm", "--cancel", "p4")
	if !kept.WasBeingRemoved {
		t.Fatalf("pool rm --cancel: %+v", kept)
	}
	k.exit(0, "check")
	k.exit(0, "pool", "rm", "p6")
	pools.Pools = nil
	k.json(&pools, "pool", "list")
	names := []string{}
	for _, p := range pools.Pools {
		names = append(names, p.Name)
	}
	if slices.Contains(names, "p6") || !slices.Contains(names, "calico-100.112.209.128-26") || !slices.Contains(names, "p4") {
		t.Fatalf("pool list after rm: %v", names)
	}
	k.exit(0, "check")
}
