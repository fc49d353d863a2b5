package node

import (
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestPodAwareThroughKubelet runs pod-aware allocation as the kubelet
// drives it: a namespace annotated with ipkeeper.io/pools gets its pods'
// addresses from that pool, a pod annotated with ipkeeper.io/ip-addrs
// gets exactly that address, and a pod of an unannotated namespace gets
// one from the config's range — each as the kubelet reports it in
// status.podIP, and each the address ipkeeper holds for the pod's UID.
func TestPodAwareThroughKubelet(t *testing.T) {
	// Two IPv4 subnets on one bridge: no gateway address on it.
	n := startNode(t, nodeOptions{leakGrace: 10 * time.Minute, noGateway: true, ranges: []any{
		[]any{map[string]any{"subnet": "10.82.0.0/24"}},
	}})
	if out, code := n.ctl(t, "pool", "add", "blue", "--cidr=10.83.0.0/24"); code != 0 {
		t.Fatalf("ipkeeperctl pool add: exit %d\n%s", code, out)
	}
	plain := n.newNamespace(t, nil)
	blue := n.newNamespace(t, map[string]string{"ipkeeper.io/pools": `["blue"]`})
	n.createPods(t, plain, "plain", 1, nil)
	n.createPods(t, blue, "pooled", 2, nil)
	n.createPods(t, blue, "static", 1, map[string]string{"ipkeeper.io/ip-addrs": `["10.83.0.77"]`})

	configRange := netip.MustParsePrefix("10.82.0.0/24")
	bluePool := netip.MustParsePrefix("10.83.0.0/24")
	want := map[string]func(netip.Addr) bool{
		plain + "/plain-0": configRange.Contains,
		blue + "/pooled-0": bluePool.Contains,
		blue + "/pooled-1": bluePool.Contains,
		blue + "/static-0": func(a netip.Addr) bool { return a == netip.MustParseAddr("10.83.0.77") },
	}
	plainPods := n.waitRunning(t, plain, []string{"plain-0"})
	bluePods := n.waitRunning(t, blue, []string{"pooled-0", "pooled-1", "static-0"})
	hs := n.handles(t)
	for ns, pods := range map[string]map[string]corev1.Pod{plain: plainPods, blue: bluePods} {
		checkPodsMatchRecords(t, pods, hs)
		for name, p := range pods {
			addrs := podAddrs(p)
			ok := want[ns+"/"+name]
			if len(addrs) != 1 || ok == nil || !ok(addrs[0]) {
				t.Errorf("pod %s/%s: status.podIPs %v, not what its annotations ask for", ns, name, addrs)
			}
		}
	}
	if t.Failed() {
		return
	}
	n.deletePods(t, plain, []string{"plain-0"})
	n.deletePods(t, blue, []string{"pooled-0", "pooled-1", "static-0"})
	n.waitGone(t, plain)
	n.waitGone(t, blue)
	n.waitFor(t, "ipkeeper holds no address once the pods are gone", podTimeout, func() (bool, string) {
		left := n.handles(t)
		return len(left) == 0, handleList(left)
	})
	n.checkClean(t)
}
