package main

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

	"sigs.k8s.io/yaml"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/testenv"
)

// The real binaries, built once in TestMain.
var ctlBin, pluginBin string

func TestMain(m *testing.M) {
	dir, remove, err := testenv.BuildCommands("./cmd/ipkeeperctl", "./cmd/ipkeeper")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctlBin, pluginBin = filepath.Join(dir, "ipkeeperctl"), filepath.Join(dir, "ipkeeper")
	code := m.Run()
	remove()
	os.Exit(code)
}

const testdata = "../../internal/importer/testdata/"

// env is a test's datastore and node, passed to both binaries.
type env struct {
	t     *testing.T
	store string
	node  string
	// sandboxes holds the stand-in network namespaces netns makes.
	sandboxes string
}

func newEnv(t *testing.T, node string) *env {
	return &env{t: t, store: t.TempDir(), node: node, sandboxes: t.TempDir()}
}

func (e *env) environ(extra ...string) []string {
	return append(os.Environ(), append([]string{"IPKEEPER_LOCAL_PATH=" + e.store, "NODENAME=" + e.node}, extra...)...)
}

// ctl runs the real ipkeeperctl and returns stdout, stderr, exit status.
func (e *env) ctl(stdin string, args ...string) (string, string, int) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ctlBin, args...)
	cmd.Env = e.environ()
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// ok runs ipkeeperctl and wants exit status 0.
func (e *env) ok(args ...string) string {
	e.t.Helper()
	out, errs, code := e.ctl("", args...)
	if code != 0 {
		e.t.Fatalf("ipkeeperctl %v: exit %d\n%s\n%s", args, code, out, errs)
	}
	return out
}

// exit runs ipkeeperctl and wants the given exit status.
func (e *env) exit(want int, args ...string) (string, string) {
	e.t.Helper()
	out, errs, code := e.ctl("", args...)
	if code != want {
		e.t.Fatalf("ipkeeperctl %v: exit %d, want %d\n%s\n%s", args, code, want, out, errs)
	}
	return out, errs
}

// withStore points a network config's ipam section at the test's store
// (the plugin reads no IPKEEPER_* variables: its datastore is the config's).
func (e *env) withStore(conf []byte) []byte {
	e.t.Helper()
	var m map[string]any
	if err := json.Unmarshal(conf, &m); err != nil {
		e.t.Fatal(err)
	}
	m["ipam"].(map[string]any)["datastore"] = map[string]any{"type": "local", "path": e.store}
	b, err := json.Marshal(m)
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

// cniResult is what the plugin prints: a result or an error.
type cniResult struct {
	Code int    `json:"code"`
	Msg  string `json:"msg"`
	IPs  []struct {
		Address string `json:"address"`
	} `json:"ips"`
}

// cni runs the real plugin.
func (e *env) cni(command, containerID, ifname, netns string, conf []byte) cniResult {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, pluginBin)
	cmd.Env = e.environ("CNI_COMMAND="+command, "CNI_CONTAINERID="+containerID, "CNI_IFNAME="+ifname,
		"CNI_NETNS="+netns, "CNI_PATH=/nonexistent")
	cmd.Stdin = bytes.NewReader(conf)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	runErr := cmd.Run()
	var r cniResult
	if out.Len() > 0 {
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			e.t.Fatalf("plugin %s printed %q: %v (stderr %s)", command, out.String(), err, errb.String())
		}
	}
	if runErr != nil && r.Code == 0 {
		e.t.Fatalf("plugin %s failed without an error object: %v\n%s", command, runErr, errb.String())
	}
	if command == "ADD" && filepath.Dir(netns) == e.sandboxes {
		if err := os.WriteFile(netns, nil, 0o600); err != nil {
			e.t.Fatal(err)
		}
	}
	return r
}

func (r cniResult) addr(t *testing.T) netip.Addr {
	t.Helper()
	if r.Code != 0 || len(r.IPs) != 1 {
		t.Fatalf("ADD result: %+v", r)
	}
	return netip.MustParsePrefix(r.IPs[0].Address).Addr()
}

// netns is a stand-in network namespace path: it does not exist when the
// plugin's ADD gets it (the plugin refuses a CNI_NETNS that exists and is
// no network namespace) and exists from the ADD's return on, so that
// ipkeeperctl's liveness checks (a sandbox whose netns path exists is
// live) see a running container.
func (e *env) netns(name string) string {
	return filepath.Join(e.sandboxes, name)
}

func TestExitStatusesAndJSON(t *testing.T) {
	e := newEnv(t, "node-a")
	e.ok("pool", "add", "p4", "--cidr", "10.20.0.0/24", "--block-size", "28")
	e.ok("pool", "add", "p6", "--cidr", "fd20::/120", "--block-size", "124")
	conf := e.withStore([]byte(`{"cniVersion":"1.0.0","name":"net","type":"bridge","ipam":{"type":"ipkeeper","pools":["p4","p6"]}}`))
	for _, id := range []string{"c1", "c2", "c3"} {
		if r := e.cni("ADD", id, "eth0", e.netns(id), conf); r.Code != 0 || len(r.IPs) != 2 {
			t.Fatalf("ADD %s: %+v", id, r)
		}
	}
	var show struct {
		Pools []struct {
			Name  string `json:"name"`
			InUse int    `json:"inUse"`
			Free  int    `json:"free"`
			Total int    `json:"total"`
		} `json:"pools"`
		Blocks []struct {
			CIDR string `json:"cidr"`
			Node string `json:"node"`
		} `json:"blocks"`
	}
	if err := json.Unmarshal([]byte(e.ok("show", "--blocks", "-o", "json")), &show); err != nil {
		t.Fatal(err)
	}
	if len(show.Pools) != 2 || show.Pools[0].InUse != 3 || show.Pools[0].Total != 254 || show.Pools[0].Free != 251 ||
		len(show.Blocks) != 2 || show.Blocks[0].Node != "node-a" {
		t.Fatalf("show: %+v", show)
	}
	var yml any
	if err := yaml.Unmarshal([]byte(e.ok("block", "show", "fd20::/124", "-o", "yaml")), &yml); err != nil {
		t.Fatalf("-o yaml: %v", err)
	}
	e.exit(0, "check")
	_, errs := e.exit(1, "pool", "rm", "p4")
	if !strings.Contains(errs, "3 addresses in use") {
		t.Fatalf("pool rm in use: %s", errs)
	}
	e.exit(1, "show", "-o", "xml")

	// Damage the store behind the CLI's back: the claim of node-a's IPv4
	// block vanishes (another node could claim the block).
	st, err := datastore.Open(context.Background(), config.Datastore{Type: config.DatastoreLocal, Path: e.store}, datastore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ref := store.BlockRef{Pool: "p4", CIDR: netip.MustParsePrefix("10.20.0.0/28")}
	c, err := st.GetClaim(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteClaim(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	st.Close()
	out, _ := e.exit(2, "check", "-o", "json")
	var rep struct {
		Problems []struct {
			Kind  string `json:"kind"`
			Block string `json:"block"`
		} `json:"problems"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Problems) != 1 || rep.Problems[0].Kind != "block-without-claim" || rep.Problems[0].Block != "10.20.0.0/28" {
		t.Fatalf("check: %s (%v)", out, err)
	}
	e.exit(3, "check", "--repair")
	e.exit(0, "check")
	// The block's handles are released by their containers' DEL.
	if r := e.cni("DEL", "c2", "eth0", "", conf); r.Code != 0 {
		t.Fatalf("DEL c2: %+v", r)
	}
	if err := json.Unmarshal([]byte(e.ok("show", "-o", "json")), &show); err != nil || show.Pools[0].InUse != 2 {
		t.Fatalf("after DEL of the repaired handle: %+v %v", show, err)
	}
}

// whereaboutsConf is the real NetworkAttachmentDefinition's config with
// the ipam type swapped for ipkeeper, as Multus passes it (named after
// the NetworkAttachmentDefinition).
func whereaboutsConf(t *testing.T) []byte {
	t.Helper()
	raw, err := os.ReadFile(testdata + "network-attachment-definition.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var nad struct {
		Spec struct {
			Config string `json:"config"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &nad); err != nil {
		t.Fatal(err)
	}
	var conf map[string]any
	if err := json.Unmarshal([]byte(nad.Spec.Config), &conf); err != nil {
		t.Fatal(err)
	}
	conf["name"] = "test"
	conf["ipam"].(map[string]any)["type"] = "ipkeeper"
	b, _ := json.Marshal(conf)
	return b
}

// TestWhereaboutsMigration replays the production leak: the imported pool
// is exhausted by two stale allocations, ADD fails with code 100 until
// one is released, then gets exactly that address; a migrated pod's DEL
// releases its imported handle.
func TestWhereaboutsMigration(t *testing.T) {
	e := newEnv(t, "worker-1")
	e.ok("import", "whereabouts", "--file", testdata+"whereabouts-ippools.yaml", "--file", testdata+"network-attachment-definition.yaml")
	conf := e.withStore(whereaboutsConf(t))
	if r := e.cni("ADD", "newpod", "net1", e.netns("newpod"), conf); r.Code != 100 {
		t.Fatalf("ADD in the exhausted imported pool: %+v, want code 100", r)
	}
	// Stale allocation: no node recorded, so only --force releases it.
	_, errs := e.exit(1, "ip", "release", "172.18.178.199")
	if !strings.Contains(errs, "--force") || !strings.Contains(errs, "test-7d9f8c6b5-stale1") {
		t.Fatalf("release refusal: %s", errs)
	}
	e.ok("ip", "release", "172.18.178.199", "--force")
	if got := e.cni("ADD", "newpod", "net1", e.netns("newpod2"), conf).addr(t); got.String() != "172.18.178.199" {
		t.Fatalf("ADD after release got %s, want 172.18.178.199", got)
	}
	// DEL of a migrated pod (podref nstest/test-7d9f8c6b5-2xk4p, offset 4).
	if r := e.cni("DEL", "1e88c0b5a1d04e7f9a3c2b6d8e0f1a2b3c4d5e6f708192a3b4c5d6e7fb5dec7c", "net1", "", conf); r.Code != 0 {
		t.Fatalf("DEL: %+v", r)
	}
	var ip struct {
		Holdings []struct {
			State string `json:"state"`
		} `json:"holdings"`
	}
	if err := json.Unmarshal([]byte(e.ok("ip", "show", "172.18.178.196", "-o", "json")), &ip); err != nil || ip.Holdings[0].State != "free" {
		t.Fatalf("172.18.178.196 after the migrated pod's DEL: %+v %v", ip, err)
	}
	e.exit(0, "check")
}

var calicoAddrs = []string{"100.112.209.128", "100.112.209.130", "100.112.209.144", "100.112.209.150",
	"100.112.209.161", "100.112.209.169", "100.112.209.174", "100.112.209.183", "100.112.209.190"}

// TestCalicoMigration imports the real Calico block and runs the plugin
// on it until the pool is exhausted: none of the 9 imported addresses is
// ever handed out, and a migrated pod's DEL frees its address.
func TestCalicoMigration(t *testing.T) {
	e := newEnv(t, "ip-10-200-205-203")
	out := e.ok("import", "calico", "--file", testdata+"calico-block-100.112.209.128-26.json", "-o", "json")
	var res struct {
		Addresses []string `json:"addresses"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || !slices.Equal(res.Addresses, calicoAddrs) {
		t.Fatalf("import: %s (%v)", out, err)
	}
	conf := e.withStore([]byte(`{"cniVersion":"1.1.0","name":"k8s-pod-network","type":"bridge","ipam":{"type":"ipkeeper","pools":["calico-100.112.209.128-26"]}}`))
	var got []string
	for i := 0; ; i++ {
		r := e.cni("ADD", fmt.Sprintf("new%d", i), "eth0", "/run/netns/never-entered", conf)
		if r.Code == 100 {
			break
		}
		got = append(got, r.addr(t).String())
		if i > 64 {
			t.Fatal("pool never exhausted")
		}
	}
	for _, a := range got {
		if slices.Contains(calicoAddrs, a) {
			t.Errorf("ADD handed out imported address %s", a)
		}
	}
	if len(got) != 54 {
		t.Errorf("%d ADDs before exhaustion, want 54 (62 usable less 8 imported)", len(got))
	}
	if got[0] != "100.112.209.173" {
		t.Errorf("first ADD got %s, want 100.112.209.173 (Calico's free order)", got[0])
	}
	if r := e.cni("DEL", "884e11ced699fe17a493ffd59f18c97fd090fd8150411a11643a280a8250c510", "eth0", "", conf); r.Code != 0 {
		t.Fatalf("DEL of a migrated pod: %+v", r)
	}
	if a := e.cni("ADD", "after-del", "eth0", "/run/netns/never-entered", conf).addr(t); a.String() != "100.112.209.130" {
		t.Fatalf("ADD after the migrated pod's DEL got %s, want its freed 100.112.209.130", a)
	}
	e.exit(0, "check")
}

// TestGCWithRealNetns: gc keeps a handle while its container's network
// namespace exists and releases it once the namespace is deleted.
func TestGCWithRealNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI must run this test as root (ip netns add)")
		}
		t.Skip("needs root for ip netns add")
	}
	name := fmt.Sprintf("ipk-ctl-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	deleted := false
	del := func() {
		if out, err := exec.Command("ip", "netns", "delete", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns delete %s: %v: %s", name, err, out)
		}
		deleted = true
	}
	t.Cleanup(func() {
		if !deleted {
			del()
		}
	})
	e := newEnv(t, "node-a")
	conf := e.withStore([]byte(`{"cniVersion":"1.0.0","name":"net","type":"bridge","ipam":{"type":"ipkeeper","ranges":[[{"subnet":"10.30.0.0/24"}],[{"subnet":"fd30::/64"}]]}}`))
	netns := filepath.Join("/var/run/netns", name)
	if r := e.cni("ADD", "live", "eth0", netns, conf); r.Code != 0 || len(r.IPs) != 2 {
		t.Fatalf("ADD: %+v", r)
	}
	type gcOut struct {
		Released []struct {
			Handle string   `json:"handle"`
			Addrs  []string `json:"addrs"`
		} `json:"released"`
		Kept int `json:"kept"`
	}
	var g gcOut
	if err := json.Unmarshal([]byte(e.ok("gc", "-o", "json")), &g); err != nil || len(g.Released) != 0 || g.Kept != 1 {
		t.Fatalf("gc with the namespace alive: %+v %v", g, err)
	}
	e.exit(1, "ip", "release", "10.30.0.1")
	del()
	if err := json.Unmarshal([]byte(e.ok("gc", "-o", "json")), &g); err != nil || len(g.Released) != 1 || g.Released[0].Handle != "net.live.eth0" || len(g.Released[0].Addrs) != 2 {
		t.Fatalf("gc after the namespace is gone: %+v %v", g, err)
	}
	e.exit(0, "check")
}
