package agent

import (
	"fmt"
	"io"
	"net/netip"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipkeeper/ipkeeper/internal/blockroute"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
)

func TestParseRouteFlags(t *testing.T) {
	env := map[string]string{"IPKEEPER_AGENT_ROUTES": "true", "NODE_NAME": "n1"}
	o, err := ParseFlags([]string{"--node-address", "a=192.0.2.1", "--node-address", "a=2001:db8::1", "--routes-resync", "5s"}, io.Discard, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	want := RouteOptions{Enabled: true, Resync: 5 * time.Second,
		Addresses: blockroute.Addresses{"a": {netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")}}}
	if !reflect.DeepEqual(o.Routes, want) {
		t.Fatalf("route options: got %+v, want %+v", o.Routes, want)
	}
	if o, err := ParseFlags(nil, io.Discard, func(k string) string { return map[string]string{"NODE_NAME": "n1"}[k] }); err != nil || o.Routes.Enabled || o.Routes.Resync != DefaultRoutesResync {
		t.Fatalf("defaults: %+v, %v", o.Routes, err)
	}
	for _, bad := range [][]string{
		{"--node-address", "a"},
		{"--node-address", "a=192.0.2.1", "--node-address", "a=192.0.2.2"},
		{"--routes-resync", "0s"},
	} {
		if _, err := ParseFlags(bad, io.Discard, func(k string) string { return env[k] }); err == nil {
			t.Errorf("ParseFlags(%q) succeeded", bad)
		}
	}
}

// TestNodeAddressWatch: with the node ServiceAccount's credentials (the
// shipped RBAC) the watch sees every Node's InternalIPs, flags take the
// place of one family's, and a changed InternalIP is signalled.
func TestNodeAddressWatch(t *testing.T) {
	s := kubetest.Require(t, srv)
	ctx := ctxT(t)
	fixtures["routes-watch"]++
	name := fmt.Sprintf("routes-watch-%d", fixtures["routes-watch"])
	node, err := s.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.31"}, {Type: corev1.NodeInternalIP, Address: "2001:db8::31"}}
	if node, err = s.Client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", s.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-node"))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewNodeAddressWatch(cs, blockroute.Addresses{name: {netip.MustParseAddr("2001:db8::99")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Shutdown)
	if got, want := w.Addresses()[name], []netip.Addr{netip.MustParseAddr("2001:db8::99"), netip.MustParseAddr("192.0.2.31")}; !reflect.DeepEqual(got, want) {
		t.Fatalf("addresses of %s: got %v, want %v", name, got, want)
	}
	for len(w.Changed) > 0 {
		<-w.Changed
	}
	node.Status.Addresses[0].Address = "192.0.2.32"
	if _, err := s.Client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Changed:
	case <-ctx.Done():
		t.Fatal("no signal after the Node's InternalIP changed")
	}
	if got := w.Addresses()[name]; len(got) != 2 || got[1] != netip.MustParseAddr("192.0.2.32") {
		t.Fatalf("addresses after the change: %v", got)
	}
}
