package e2e

import (
	"maps"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/test/e2e/cnirun"
)

// sandboxNetns creates a named network namespace for a pod sandbox and
// returns its name and path. It is deleted when the test ends unless the
// test deleted it already (the node "rebooted").
func sandboxNetns(t *testing.T) (name, path string) {
	t.Helper()
	name = netnsName("sbx")
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	path = filepath.Join("/var/run/netns", name)
	t.Cleanup(func() {
		if unlisted, _ := netnsUnlisted(name); unlisted {
			return
		}
		if out, err := exec.Command("ip", "netns", "delete", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns delete %s: %v: %s", name, err, out)
		}
	})
	return name, path
}

// netnsUnlisted reports whether `ip netns list` does not list name.
func netnsUnlisted(name string) (bool, error) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return false, err
	}
	for l := range strings.Lines(string(out)) {
		if f := strings.Fields(l); len(f) > 0 && f[0] == name {
			return false, nil
		}
	}
	return true, nil
}

// takeoverFamilies are range sets of exactly three addresses each: IPv4,
// IPv6, and both side by side.
var takeoverFamilies = []struct {
	name   string
	ranges [][]map[string]any
}{
	{"IPv4", [][]map[string]any{{{"subnet": "10.93.0.0/24", "rangeStart": "10.93.0.10", "rangeEnd": "10.93.0.12"}}}},
	{"IPv6", [][]map[string]any{{{"subnet": "fd93::/64", "rangeStart": "fd93::10", "rangeEnd": "fd93::12"}}}},
	{"dual-stack", [][]map[string]any{
		{{"subnet": "10.93.0.0/24", "rangeStart": "10.93.0.10", "rangeEnd": "10.93.0.12"}},
		{{"subnet": "fd93::/64", "rangeStart": "fd93::10", "rangeEnd": "fd93::12"}}}},
}

// TestTakeoverOnFullPool runs the plugin binary as a kubelet's runtime
// would after a node reboot, in pod-aware mode against a real
// kube-apiserver (pods with real UIDs, the plugin's shipped RBAC) and
// with plain K8S_POD_* CNI_ARGS: three pods fill a pool of exactly three
// addresses (per family); pod P's first sandbox has a real network
// namespace, which is then deleted (the reboot). P's new sandbox (new
// container ID, no DEL of the old one) gets its old addresses back on the
// full pool; pod Q, whose old sandbox's namespace still exists, gets 100,
// as does a new pod; `ipkeeperctl check` is clean (with the API's view of
// the pods in pod-aware mode); the old sandbox's late DEL releases nothing
// of the new one's, and the new one's DEL frees its addresses.
func TestTakeoverOnFullPool(t *testing.T) {
	needRoot(t)
	needIpkeeper(t)
	needCtl(t)
	f := newKubeFixture(t)
	for _, podAware := range []bool{true, false} {
		for _, fam := range takeoverFamilies {
			mode := "plain"
			if podAware {
				mode = "pod-aware"
			}
			t.Run(mode+"/"+fam.name, func(t *testing.T) {
				ipamConf := map[string]any{"datastore": map[string]any{"type": "local", "path": t.TempDir()}, "ranges": fam.ranges}
				var stdin []byte
				if podAware {
					stdin = f.podConf(t, "node-a", ipamConf)
				} else {
					i := merge(map[string]any{"type": "ipkeeper", "nodeName": "node-a"}, ipamConf)
					stdin = mustJSON(t, map[string]any{"cniVersion": "1.1.0", "name": "podnet", "type": "bridge", "ipam": i})
				}
				cf := writeTemp(t, stdin)
				pods := map[string]*corev1.Pod{}
				for _, n := range []string{"p", "q", "r", "s"} {
					name := idf("takeover-%s-%s-%s", mode, strings.ToLower(fam.name), n)
					if podAware {
						pods[n] = f.pod(t, "ns-plain", name, "node-a", nil)
					} else {
						pods[n] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns-plain", Name: name, UID: k8stypes.UID("uid-" + name)}}
					}
				}
				add := func(id, netns string, p *corev1.Pod) cnirun.Output {
					t.Helper()
					c := podCall(id, p, stdin)
					c.NetNS = netns
					out, err := cnirun.Run(ctxT(t), ipkeeperBin, c)
					if err != nil {
						t.Fatal(err)
					}
					return out
				}
				nsP, pathP := sandboxNetns(t)
				_, pathQ := sandboxNetns(t)
				_, pathR := sandboxNetns(t)
				oldP := addrsOf(t, stdin, add("p-sandbox-1", pathP, pods["p"]))
				oldQ := addrsOf(t, stdin, add("q-sandbox-1", pathQ, pods["q"]))
				oldR := addrsOf(t, stdin, add("r-sandbox-1", pathR, pods["r"]))
				if n := len(allocated(t, cf)); n != 3*len(fam.ranges) {
					t.Fatalf("%d addresses allocated, want the pool full (%d)", n, 3*len(fam.ranges))
				}
				_, pathS := sandboxNetns(t)
				wantCNIError(t, "ADD of a new pod on the full pool", add("s-sandbox-1", pathS, pods["s"]), codeExhausted)

				// The node reboots: P's sandbox namespace is gone, no DEL came.
				if out, err := exec.Command("ip", "netns", "delete", nsP).CombinedOutput(); err != nil {
					t.Fatalf("ip netns delete %s: %v: %s", nsP, err, out)
				}
				_, pathP2 := sandboxNetns(t)
				out := add("p-sandbox-2", pathP2, pods["p"])
				got := addrsOf(t, stdin, out)
				if !slices.Equal(got, oldP) {
					t.Fatalf("P's new sandbox got %v, want its old sandbox's %v", got, oldP)
				}
				for _, want := range []string{"took over", "p-sandbox-1", "p-sandbox-2", pathP, string(pods["p"].UID)} {
					if !strings.Contains(string(out.Stderr), want) {
						t.Errorf("the plugin's log does not name %s:\n%s", want, out.Stderr)
					}
				}
				if strings.Contains(string(out.Stdout), "took over") {
					t.Errorf("the takeover was logged on stdout:\n%s", out.Stdout)
				}
				t.Logf("plugin log: %s", strings.TrimSpace(string(out.Stderr)))

				// Q's old sandbox namespace still exists: no takeover.
				_, pathQ2 := sandboxNetns(t)
				out = add("q-sandbox-2", pathQ2, pods["q"])
				wantCNIError(t, "ADD of Q's new sandbox while its old namespace exists", out, codeExhausted)
				if strings.Contains(string(out.Stderr), "took over") {
					t.Errorf("Q's ADD logged a takeover:\n%s", out.Stderr)
				}

				owners := allocations(t, cf)
				wantOwners := map[netip.Addr]string{}
				for _, o := range []struct {
					addrs []netip.Addr
					id    string
				}{{oldP, "p-sandbox-2"}, {oldQ, "q-sandbox-1"}, {oldR, "r-sandbox-1"}} {
					for _, a := range o.addrs {
						wantOwners[a] = "podnet." + o.id + ".eth0"
					}
				}
				if !maps.Equal(owners, wantOwners) {
					t.Fatalf("owners %v, want %v", owners, wantOwners)
				}
				check := []string{"check"}
				clean := []string{"no problems"}
				if podAware {
					// With the API's view: no allocation of a gone pod or
					// sandbox is left either.
					check = append(check, "--kubeconfig", f.srv.AdminKubeconfig)
					clean = append(clean, "no leaked addresses")
				}
				checkClean := func() {
					t.Helper()
					out := string(ctl(t, cf, check...))
					for _, c := range clean {
						if !strings.Contains(out, c) {
							t.Errorf("ipkeeperctl %s does not say %q:\n%s", strings.Join(check, " "), c, out)
						}
					}
				}
				checkClean()

				// The old sandbox's DEL comes late: nothing of the new one's goes.
				delOld := directCall("DEL", "p-sandbox-1", stdin)
				delOld.NetNS = pathP
				if out, err := cnirun.Run(ctxT(t), ipkeeperBin, delOld); err != nil || out.ExitCode != 0 {
					t.Fatalf("late DEL of P's old sandbox: %v\n%v", err, out)
				}
				if owners := allocations(t, cf); !maps.Equal(owners, wantOwners) {
					t.Fatalf("after the old sandbox's DEL: owners %v, want %v", owners, wantOwners)
				}
				checkClean()
				// The new sandbox's DEL frees its addresses.
				delNew := directCall("DEL", "p-sandbox-2", stdin)
				delNew.NetNS = pathP2
				if out, err := cnirun.Run(ctxT(t), ipkeeperBin, delNew); err != nil || out.ExitCode != 0 {
					t.Fatalf("DEL of P's new sandbox: %v\n%v", err, out)
				}
				for _, a := range oldP {
					if state, _ := ipState(t, cf, a); state != "free" {
						t.Errorf("%v is %s after the new sandbox's DEL, want free", a, state)
					}
				}
				checkClean()
			})
		}
	}
}

// codeExhausted is the plugin's code for a full pool.
const codeExhausted = 100
