package kubeverbs_test

import (
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
)

// TestRoutesOnKubernetes: on the kubernetes datastore, with the
// controller's ServiceAccount, routes takes each node's address from its
// Node's InternalIPs, names a node without one of a family it has blocks
// of, and takes --node-address for it.
func TestRoutesOnKubernetes(t *testing.T) {
	srv := kubetest.Start(t)
	ctx := t.Context()
	sa := srv.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-controller")
	ds := config.Datastore{Type: config.DatastoreKubernetes, Kubeconfig: sa, Prefix: "ctl-routes",
		DialTimeout: config.DefaultDialTimeout, RequestTimeout: config.DefaultRequestTimeout}
	k := &kubeEnv{t: t, env: append(os.Environ(), "IPKEEPER_DATASTORE=kubernetes", "IPKEEPER_DATASTORE_KUBECONFIG="+sa,
		"IPKEEPER_DATASTORE_PREFIX="+ds.Prefix)}
	k.exit(0, "pool", "add", "p4", "--cidr", "10.61.0.0/24", "--block-size", "28")
	k.exit(0, "pool", "add", "p6", "--cidr", "fd61::/120", "--block-size", "124")
	for n, ips := range map[string][]string{"node-a": {"192.0.2.21", "2001:db8::21"}, "node-b": {"192.0.2.22"}} {
		node, err := srv.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, ip := range ips {
			node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
		}
		if _, err := srv.Client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := datastore.Open(ctx, ds, datastore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a := allocator.New(st, nil)
	for _, n := range []string{"node-a", "node-b"} {
		if _, err := a.Allocate(ctx, allocator.Request{Handle: ipam.Handle{ID: "net." + n + ".eth0", Network: "net", ContainerID: n, IfName: "eth0", Node: n},
			Sets: [][]string{{"p4"}, {"p6"}}}); err != nil {
			t.Fatal(err)
		}
	}
	_, errs := k.exit(1, "routes")
	if !strings.Contains(errs, `node "node-b" has no known IPv6 address`) || strings.Contains(errs, `"node-a"`) {
		t.Fatalf("routes without node-b's IPv6 address: %s", errs)
	}
	out, _ := k.exit(0, "routes", "-o", "frr", "--node-address", "node-b=2001:db8::22")
	want := `ip route 10.61.0.0/28 192.0.2.21
ip route 10.61.0.16/28 192.0.2.22
ipv6 route fd61::/124 2001:db8::21
ipv6 route fd61::10/124 2001:db8::22
`
	if out != want {
		t.Fatalf("routes -o frr:\n%s\nwant:\n%s", out, want)
	}
}
