package controller

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

// leaderOf waits until one of ps leads and returns it.
func leaderOf(t *testing.T, limit time.Duration, ps ...*proc) *proc {
	t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		for _, p := range ps {
			if page, err := p.scrape(); err == nil && metricIn(page, "ipkeeper_leader") == 1 {
				return p
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no controller leads within %v", limit)
	return nil
}

// leaderFlags make leader election quick enough for tests.
var leaderFlags = []string{"--leader-elect=true", "--lease-namespace=kube-system", "--lease-duration=4s", "--renew-deadline=3s", "--retry-period=500ms"}

// TestProductionIncident reproduces the incident of
// internal/importer/testdata end to end: the production
// NetworkAttachmentDefinition's whereabouts config (exactly five usable
// addresses) with ipkeeper as the IPAM type, five pods
// on node-b hold them, node-b dies (its Node and pods are deleted, no CNI
// DEL comes). A new pod on node-a gets error 100. With two controller
// replicas running (leader election, --leak-grace 2s, a resync period far
// longer than the test), the five addresses are released with no manual
// step and the new pod's ADD, retried as a kubelet does, succeeds.
func TestProductionIncident(t *testing.T) {
	s := setup(t)
	c := newCluster(t, s)
	net := nadNetwork(t)
	nodeA, nodeB := c.node("a"), c.node("b")

	held := map[netip.Addr]string{}
	var uids []string
	for i := range 5 {
		name := "app-" + string(rune('0'+i))
		uid := c.pod(name, nodeB)
		uids = append(uids, uid)
		a := net.mustAdd(nodeB, c.ns, name, uid, "b-sandbox-"+name)
		if prev, dup := held[a]; dup {
			t.Fatalf("%s and %s both got %v", prev, name, a)
		}
		held[a] = name
	}
	lo, hi := netip.MustParseAddr("172.18.178.196"), netip.MustParseAddr("172.18.178.200")
	for a := range held {
		if a.Less(lo) || hi.Less(a) {
			t.Fatalf("%v is outside the NAD's range_start..range_end", a)
		}
	}

	flags := append([]string{"--leak-grace=2s", "--resync=10m"}, leaderFlags...)
	p1 := startController(t, "controller-1", net.env(), flags...)
	p2 := startController(t, "controller-2", net.env(), flags...)
	leader := leaderOf(t, time.Minute, p1, p2)
	leader.waitMetric(time.Minute, "ipkeeper_reconcile_duration_seconds_count", func(v float64) bool { return v >= 1 })

	newUID := c.pod("new", nodeA)
	out := net.add(nodeA, c.ns, "new", newUID, "a-sandbox-new")
	cerr, err := out.CNIError()
	if err != nil || cerr.Code != 100 {
		t.Fatalf("ADD on a full pool: want error 100, got %v\n%v", err, out)
	}

	// node-b dies with its pods: no DEL ever comes.
	start := time.Now()
	c.deleteNode(nodeB)
	for _, name := range slices.Sorted(mapValues(held)) {
		c.deletePod(name)
	}
	// The kubelet on node-a retries the ADD; each failure is 100 until
	// the controller has released the leaked addresses.
	var got netip.Addr
	for i := 0; ; i++ {
		out := net.add(nodeA, c.ns, "new", newUID, "a-sandbox-new")
		if out.ExitCode == 0 {
			got = resultAddr(t, out.Stdout)
			break
		}
		if cerr, err := out.CNIError(); err != nil || cerr.Code != 100 {
			t.Fatalf("retried ADD: want success or 100, got %v\n%v", err, out)
		}
		if i >= 1200 {
			t.Fatalf("the new pod's ADD still fails after %d retries over %v", i, time.Since(start))
		}
		time.Sleep(50 * time.Millisecond)
	}
	elapsed := time.Since(start)
	t.Logf("production incident: %v from deleting node-b and its pods to the new pod's successful ADD on node-a (leak grace 2s)", elapsed.Round(time.Millisecond))
	if _, ok := held[got]; !ok {
		t.Fatalf("the new pod got %v, not one of the released addresses %v", got, held)
	}

	// Every leaked address released, with no manual step, each logged
	// with pod, UID, address, node and reason; the new pod's stays.
	leader = leaderOf(t, time.Minute, p1, p2)
	leader.waitMetric(time.Minute, `ipkeeper_releases_total{reason="pod-gone"}`, func(v float64) bool { return v == 5 })
	for a, name := range held {
		n := p1.logCount("released leaked address", `"pod":"`+c.ns+"/"+name+`"`, `"address":"`+a.String()+`"`, `"node":"`+nodeB+`"`, `"reason":"pod-gone"`) +
			p2.logCount("released leaked address", `"pod":"`+c.ns+"/"+name+`"`, `"address":"`+a.String()+`"`, `"node":"`+nodeB+`"`, `"reason":"pod-gone"`)
		if n != 1 {
			t.Errorf("%d release log lines for %s (%s), want 1", n, name, a)
		}
	}
	for _, uid := range uids {
		if p1.logCount(`"uid":"`+uid+`"`)+p2.logCount(`"uid":"`+uid+`"`) == 0 {
			t.Errorf("no log line names UID %s", uid)
		}
	}
	hs := net.handles()
	if len(hs) != 1 || hs["a-sandbox-new"].IPs[0].Addr != got {
		t.Fatalf("handles after the incident: %+v", hs)
	}
	stdout, stderr, code := net.ctl("check", "--kubeconfig", s.AdminKubeconfig)
	if code != 0 {
		t.Fatalf("ipkeeperctl check --kubeconfig: exit %d\n%s%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "no leaked addresses") {
		t.Errorf("check output: %s", stdout)
	}
}

func mapValues[K comparable, V any](m map[K]V) func(func(V) bool) {
	return func(yield func(V) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}
