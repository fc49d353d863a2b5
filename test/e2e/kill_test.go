package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/consistency"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	_ "github.com/ipkeeper/ipkeeper/internal/datastore/kubeopen"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
	"github.com/ipkeeper/ipkeeper/internal/store/local"
	"github.com/ipkeeper/ipkeeper/test/e2e/cnirun"
)

// killBackend is a datastore the kill test runs on.
type killBackend struct {
	name string
	// ds returns the datastore object of the plugin's config and the
	// config the test opens to check.
	ds     func(t *testing.T) (map[string]any, config.Datastore)
	rounds int
}

// killBackends are local (bbolt), a real etcd and a real kube-apiserver
// with the CRDs and the datastore's RBAC (the plugin hands those configs
// to ipkeeper-kube). One kubeconfig serves both nodes and ipkeeperctl:
// the controller's account, since a node's own credentials write only its
// own node's objects.
var killBackends = []killBackend{
	{"local", func(t *testing.T) (map[string]any, config.Datastore) {
		dir := t.TempDir()
		return map[string]any{"type": "local", "path": dir}, config.Datastore{Type: config.DatastoreLocal, Path: dir}
	}, 12},
	{"etcd", func(t *testing.T) (map[string]any, config.Datastore) {
		srv := etcdtest.ForTest(t, nil)
		return map[string]any{"type": "etcd", "endpoints": []string{srv.Endpoint}, "prefix": "/kill"},
			config.Datastore{Type: config.DatastoreEtcd, Endpoints: []string{srv.Endpoint}, Prefix: "/kill",
				DialTimeout: config.DefaultDialTimeout, RequestTimeout: config.DefaultRequestTimeout}
	}, 8},
	{"kubernetes", func(t *testing.T) (map[string]any, config.Datastore) {
		srv := kubetest.Start(t)
		kc := srv.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-controller")
		return map[string]any{"type": "kubernetes", "kubeconfig": kc, "prefix": "kill"},
			config.Datastore{Type: config.DatastoreKubernetes, Kubeconfig: kc, Prefix: "kill",
				DialTimeout: config.DefaultDialTimeout, RequestTimeout: config.DefaultRequestTimeout}
	}, 5},
}

// TestKill9 kills ipkeeper processes with SIGKILL at random moments of
// ADD and DEL, on each datastore, two nodes sharing the store. After every
// round the leftovers are reclaimed the two ways an operator has: on
// node-a the runtime's CNI GC with the ADDs that printed a result as its
// valid attachments; on node-b `ipkeeperctl gc`, which releases handles
// whose network namespace is gone (each ADD there gets a real namespace,
// deleted unless the ADD printed a result) and adopts blocks claimed by
// killed ADDs. Then `ipkeeperctl check` is clean (no
// address with two holders, no orphan claim, no dangling loan), every ADD
// that printed a result still holds both its addresses (durable before
// printed), and nothing else is held.
func TestKill9(t *testing.T) {
	needRoot(t)
	needIpkeeper(t)
	needKubeSibling(t)
	needCtl(t)
	for _, b := range killBackends {
		t.Run(b.name, func(t *testing.T) { kill9(t, b) })
	}
}

func kill9(t *testing.T, b killBackend) {
	dsJSON, ds := b.ds(t)
	conf := func(node string) []byte {
		return mustJSON(t, map[string]any{"cniVersion": "1.1.0", "name": "kill", "type": "bridge",
			// Blocks of 8 addresses: ADDs claim blocks often, so that kills
			// land between a claim and the node's write too.
			"ipam": map[string]any{"type": "ipkeeper", "nodeName": node, "datastore": dsJSON, "blockSize": 29, "ipv6BlockSize": 125,
				"ranges": []any{[]any{map[string]any{"subnet": "10.66.0.0/22"}}, []any{map[string]any{"subnet": "fd66::/118"}}}}})
	}
	nodes := []string{"node-a", "node-b"}
	ctlConf := filepath.Join(t.TempDir(), "node-b.conf")
	if err := os.WriteFile(ctlConf, conf("node-b"), 0o600); err != nil {
		t.Fatal(err)
	}
	// node-b's ADDs get a network namespace each, which exists while the
	// "pod" lives.
	nsOf := map[string]string{} // container ID -> namespace name
	const perRound = 10
	// The kills fall anywhere from the start to past the end of a round
	// (perRound processes, half of them on one node, where they take
	// turns at the node lock; timed here from one ADD alone, on this
	// machine as it is now): some are killed early, some in the middle
	// of their writes, some finish.
	// (The first ADD on a new store also creates its pools and claims
	// its blocks, and a fresh API server serves new CRDs slowly at
	// first: the second one is timed.)
	var calib cnirun.Output
	for _, id := range []string{"warmup", "calibrate"} {
		if calib = ipamRun(t, "ADD", id, conf("node-a")); calib.ExitCode != 0 {
			t.Fatalf("ADD without kills failed:\n%v", calib)
		}
	}
	for _, id := range []string{"warmup", "calibrate"} {
		if out := ipamRun(t, "DEL", id, conf("node-a")); out.ExitCode != 0 {
			t.Fatalf("DEL without kills failed:\n%v", out)
		}
	}
	maxDelay := perRound * calib.Duration
	var mu sync.Mutex
	killed, finished, leaked := 0, 0, 0
	printed := map[string]string{} // handle ID -> node
	for r := range b.rounds {
		var wg sync.WaitGroup
		for i := range perRound {
			verb, id := "ADD", fmt.Sprintf("r%02dc%d", r, i)
			if r > 0 && i%3 == 2 {
				verb, id = "DEL", fmt.Sprintf("r%02dc%d", r-1, i)
			}
			node := nodes[i%2]
			netns := anyNetNS
			if node == "node-b" && verb == "ADD" {
				netns = podNetns(t, id, nsOf)
			}
			wg.Go(func() {
				cmd := exec.Command(ipkeeperBin)
				cmd.Env = append(os.Environ(), "CNI_COMMAND="+verb, "CNI_CONTAINERID="+id,
					"CNI_NETNS="+netns, "CNI_IFNAME=eth0", "CNI_PATH="+toolsDir)
				cmd.Stdin = bytes.NewReader(conf(node))
				var out bytes.Buffer
				cmd.Stdout = &out
				if err := cmd.Start(); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Duration(rand.N(maxDelay.Microseconds())) * time.Microsecond)
				sigErr := cmd.Process.Signal(syscall.SIGKILL)
				werr := cmd.Wait()
				mu.Lock()
				defer mu.Unlock()
				if ee, ok := werr.(*exec.ExitError); ok && sigErr == nil && ee.Sys().(syscall.WaitStatus).Signaled() {
					killed++
				} else {
					finished++
				}
				var res struct {
					IPs []json.RawMessage `json:"ips"`
				}
				switch {
				case verb == "DEL":
					// Done or killed, the handle may be gone: not checked.
					delete(printed, "kill."+id+".eth0")
				case json.Unmarshal(out.Bytes(), &res) == nil && len(res.IPs) == 2:
					printed["kill."+id+".eth0"] = node
				}
			})
		}
		wg.Wait()
		// A pod per node that died after its ADD without a DEL (the node
		// crashed, the runtime lost it): its ADD runs to the end, then it
		// is forgotten here (and node-b's namespace goes below), so
		// that the GCs below must release it.
		for _, node := range nodes {
			id := fmt.Sprintf("r%02dgone%s", r, node[len(node)-1:])
			netns := anyNetNS
			if node == "node-b" {
				netns = podNetns(t, id, nsOf)
			}
			call := directCall("ADD", id, conf(node))
			call.NetNS = netns
			out, err := cnirun.Run(ctxT(t), ipkeeperBin, call)
			if err != nil || out.ExitCode != 0 {
				t.Fatalf("round %d: ADD %s on %s without a kill: %v\n%v", r, id, node, err, out)
			}
			leaked++
		}
		// node-a: the runtime's GC with the attachments still in use.
		valid := []types.GCAttachment{}
		for id, n := range printed {
			if n == "node-a" {
				valid = append(valid, types.GCAttachment{ContainerID: containerOf(id), IfName: "eth0"})
			}
		}
		if out := ipamRun(t, "GC", "", withValid(t, conf("node-a"), valid)); out.ExitCode != 0 {
			t.Fatalf("round %d: GC on node-a failed:\n%v", r, out)
		}
		// node-b: the namespaces of pods whose ADD printed nothing (or
		// that died) are gone.
		for id, ns := range nsOf {
			if printed["kill."+id+".eth0"] == "" {
				deleteNetns(t, ns)
				delete(nsOf, id)
			}
		}
		ctl(t, ctlConf, "gc", "--node", "node-b")
		if out, stderr, err := ctlRun(ctlConf, "check"); err != nil {
			t.Fatalf("round %d: ipkeeperctl check after kill -9 and gc: %v\n%s%s", r, err, out, stderr)
		}
		checkAfterKills(t, ds, printed)
	}
	byNode := map[string]int{}
	for _, n := range printed {
		byNode[n]++
	}
	t.Logf("%s: printed ADDs held at the end per node: %v", b.name, byNode)
	t.Logf("%s: kills within %v (%d × one ADD alone); %d of %d plugin processes killed mid-run, %d finished; %d printed ADD results checked durable; %d finished ADDs forgotten and reclaimed",
		b.name, maxDelay, perRound, killed, b.rounds*perRound, finished, len(printed), leaked)
	if killed == 0 || finished == 0 || leaked == 0 || byNode["node-b"] == 0 {
		t.Fatal("every process was killed, or none: the test tested nothing")
	}
}

// podNetns creates a network namespace for the container id's pod,
// records it in nsOf and deletes it when the test ends (unless deleted
// before); it returns its path.
func podNetns(t *testing.T, id string, nsOf map[string]string) string {
	t.Helper()
	name := netnsName("kill")
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	nsOf[id] = name
	t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join("/var/run/netns", name)); err == nil {
			deleteNetns(t, name)
		}
	})
	return filepath.Join("/var/run/netns", name)
}

// deleteNetns deletes a named network namespace: its pod died.
func deleteNetns(t *testing.T, name string) {
	t.Helper()
	if out, err := exec.Command("ip", "netns", "delete", name).CombinedOutput(); err != nil {
		t.Errorf("ip netns delete %s: %v: %s", name, err, out)
	}
}

// containerOf is the container ID of a handle ID "kill.<id>.eth0".
func containerOf(handleID string) string {
	return strings.TrimSuffix(strings.TrimPrefix(handleID, "kill."), ".eth0")
}

// checkAfterKills verifies the store after a round of kills and the GCs:
// bbolt's own check (local), no finding of the consistency checker, every
// printed ADD holding its two addresses and no other handle left.
func checkAfterKills(t *testing.T, ds config.Datastore, printed map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if ds.Type == config.DatastoreLocal {
		s, err := local.Open(ctx, ds.Path)
		if err != nil {
			t.Fatalf("store does not open after kill -9: %v", err)
		}
		err = s.Check(ctx)
		s.Close()
		if err != nil {
			t.Fatalf("bbolt consistency check: %v", err)
		}
	}
	s, err := datastore.Open(ctx, ds, datastore.Options{})
	if err != nil {
		t.Fatalf("store does not open after kill -9: %v", err)
	}
	defer s.Close()
	rep, err := consistency.CheckStore(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Err(); err != nil {
		t.Fatalf("after kill -9 and GC: %v", err)
	}
	a := allocator.New(s, nil)
	for id, node := range printed {
		if h, ok, err := a.Handle(ctx, node, id); err != nil || !ok || len(h.IPs) != 2 {
			t.Fatalf("ADD %s printed a result, but the store has %+v (found %v, %v)", id, h, ok, err)
		}
	}
	hs, err := a.Handles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if _, ok := printed[h.ID]; !ok {
			t.Fatalf("handle %s on %s is left after GC, but its ADD printed nothing (or was DELeted)", h.ID, h.Node)
		}
	}
}
