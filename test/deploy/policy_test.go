package deploy

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/nodealloc"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kube"
)

// authzPartition returns a partition of the shared API server for one
// policy test (a fresh one on every run, so that -count=2 starts over).
func authzPartition(what string) string {
	return fmt.Sprintf("authz-%s-%d", what, time.Now().UnixNano()%1e9)
}

var (
	ipamNodesGVR  = schema.GroupVersionResource{Group: "ipkeeper.io", Version: "v1beta1", Resource: "ipamnodes"}
	ipamBlocksGVR = schema.GroupVersionResource{Group: "ipkeeper.io", Version: "v1beta1", Resource: "ipamblocks"}
)

// openKube opens the Kubernetes datastore with kubeconfig kc in partition
// prefix.
func openKube(t *testing.T, kc, prefix string) *kube.Store {
	t.Helper()
	s, err := kube.Open(kube.Config{Kubeconfig: kc, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func dynamicFor(t *testing.T, kc string) *dynamic.DynamicClient {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// denied fails t unless err is the node-writes policy's refusal, as the
// datastore reports it (store.ErrDenied) or as the API answers it (403).
func denied(t *testing.T, what string, err error) {
	t.Helper()
	var st apierrors.APIStatus
	switch {
	case err == nil:
		t.Errorf("%s: allowed, want refused by %s", what, kubetest.NodeWritesPolicy)
	case !errors.Is(err, store.ErrDenied) && !(errors.As(err, &st) && apierrors.IsForbidden(err)):
		t.Errorf("%s: %v, want 403 from %s", what, err, kubetest.NodeWritesPolicy)
	case !strings.Contains(err.Error(), kubetest.NodeWritesPolicy):
		t.Errorf("%s: %v, want the refusal of %s (not RBAC's)", what, err, kubetest.NodeWritesPolicy)
	}
}

func allowed(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v, want allowed", what, err)
	}
}

// TestNodeTokenCarriesNode: a token bound to a pod on a node (what the
// kubelet projects into the DaemonSet's pod) names the node in the user's
// extra, which is what deploy/'s node-writes policy reads; a token bound
// to nothing does not.
func TestNodeTokenCarriesNode(t *testing.T) {
	s := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	whoami := func(kc string) authenticationv1.UserInfo {
		r, err := clientFromKubeconfig(t, kc).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return r.Status.UserInfo
	}
	u := whoami(s.NodeKubeconfig(t, "node-a"))
	if u.Username != "system:serviceaccount:kube-system:ipkeeper-node" || !slices.Equal(u.Extra[kubetest.NodeNameExtra], []string{"node-a"}) {
		t.Fatalf("bound token's user %q, extra %v: want ipkeeper-node with %s [node-a]", u.Username, u.Extra, kubetest.NodeNameExtra)
	}
	if u := whoami(s.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-node")); len(u.Extra[kubetest.NodeNameExtra]) != 0 {
		t.Fatalf("an unbound token carries node %v", u.Extra[kubetest.NodeNameExtra])
	}
}

// authzPool has two blocks of 8 addresses: node-b claims the first,
// node-a the second; then node-a borrows from node-b's.
var authzPool = ipam.Pool{Name: "authz", CIDR: netip.MustParsePrefix("10.61.0.0/28"), BlockSize: 29}

// TestNodeWritesAllocation runs the allocator on the Kubernetes datastore
// with each node's own credentials (a token bound to a pod on the node),
// under deploy/'s RBAC and node-writes policy: claims and allocations on
// the node, a borrow from the other node's block when the node's block is
// full and no block is left, and its release, all go through; node-b's
// object stays readable and usable after node-a wrote its loans in it.
func TestNodeWritesAllocation(t *testing.T) {
	s := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	part := authzPartition("alloc")
	admin := openKube(t, s.AdminKubeconfig, part)
	createPool(ctx, t, admin, authzPool)
	allocA := allocator.New(openKube(t, s.NodeKubeconfig(t, "node-a"), part), nil)
	allocB := allocator.New(openKube(t, s.NodeKubeconfig(t, "node-b"), part), nil)
	add := func(a *allocator.Allocator, node, id string) (ipam.Handle, error) {
		return a.Allocate(ctx, allocator.Request{Handle: ipam.Handle{ID: id, Network: "authz", ContainerID: id, IfName: "eth0", Node: node},
			Sets: [][]string{{authzPool.Name}}})
	}
	blockB := authzPool.BlockAt(0)
	if h, err := add(allocB, "node-b", "authz.b1.eth0"); err != nil || !blockB.Contains(h.IPs[0].Addr) {
		t.Fatalf("node-b's first ADD: %+v, %v; want an address of %s", h, err, blockB)
	}
	// node-a claims the other block, fills it, then borrows.
	var borrowed ipam.Handle
	for i := range 9 {
		id := fmt.Sprintf("authz.a%d.eth0", i)
		h, err := add(allocA, "node-a", id)
		if err != nil {
			t.Fatalf("node-a's ADD %d: %v", i, err)
		}
		if blockB.Contains(h.IPs[0].Addr) {
			borrowed = h
			break
		}
	}
	if borrowed.ID == "" {
		t.Fatal("node-a never borrowed from node-b's block")
	}
	nb, err := admin.GetNode(ctx, "node-b")
	if err != nil {
		t.Fatalf("node-b's object after node-a's loan: %v", err)
	}
	if r, ok := nb.Handle(borrowed.ID); !ok || r.Node != "node-a" {
		t.Fatalf("node-b's object holds %+v (present %v) for node-a's loan %s", r, ok, borrowed.ID)
	}
	if h, err := add(allocB, "node-b", "authz.b2.eth0"); err != nil || !blockB.Contains(h.IPs[0].Addr) || h.IPs[0].Addr == borrowed.IPs[0].Addr {
		t.Fatalf("node-b's ADD after the loan: %+v, %v", h, err)
	}
	if freed, err := allocA.Release(ctx, "node-a", borrowed.ID); err != nil || len(freed) != 1 || freed[0] != borrowed.IPs[0].Addr {
		t.Fatalf("node-a's release of the loan: %v, %v", freed, err)
	}
	if nb, err = admin.GetNode(ctx, "node-b"); err != nil {
		t.Fatal(err)
	}
	if _, ok := nb.Handle(borrowed.ID); ok {
		t.Fatal("node-b's object still holds the released loan")
	}
}

func withLabel(l map[string]string, key string) map[string]string {
	out := map[string]string{key: ""}
	for k, v := range l {
		out[k] = v
	}
	return out
}

// TestNodeWritesUnaffine: the object of no node (store.UnaffineNode,
// addresses imported from whereabouts) under the node-writes policy: a
// node borrows from its blocks and releases the loan with its own
// credentials; its DEL of an imported address (a record of no node) is
// refused by the policy and so leaves the address to the controller,
// without failing; the controller's account releases it.
func TestNodeWritesUnaffine(t *testing.T) {
	s := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	part := authzPartition("unaffine")
	admin := openKube(t, s.AdminKubeconfig, part)
	pool := ipam.Pool{Name: "imported", CIDR: netip.MustParsePrefix("10.62.0.0/29"), BlockSize: 29}
	createPool(ctx, t, admin, pool)
	// What an import of whereabouts leaves: a block of no node holding a
	// pod's address.
	imported := ipam.Handle{ID: "imp.c1.eth0", Network: "imp", ContainerID: "c1", IfName: "eth0", Node: store.UnaffineNode}
	if _, err := admin.CreateClaim(ctx, store.Claim{BlockRef: store.BlockRef{Pool: pool.Name, CIDR: pool.BlockAt(0)}, Node: store.UnaffineNode}); err != nil {
		t.Fatal(err)
	}
	un := nodealloc.AddBlock(store.Node{Name: store.UnaffineNode}, pool, pool.BlockAt(0))
	un, _, err := nodealloc.Take(un, pool, imported)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CreateNode(ctx, un); err != nil {
		t.Fatal(err)
	}

	allocA := allocator.New(openKube(t, s.NodeKubeconfig(t, "node-a"), part), nil)
	h, err := allocA.Allocate(ctx, allocator.Request{Handle: ipam.Handle{ID: "imp.a1.eth0", Network: "imp", ContainerID: "a1", IfName: "eth0", Node: "node-a"},
		Sets: [][]string{{pool.Name}}})
	if err != nil || !pool.CIDR.Contains(h.IPs[0].Addr) {
		t.Fatalf("node-a borrowing from the block of no node: %+v, %v", h, err)
	}
	if freed, err := allocA.Release(ctx, "node-a", h.ID); err != nil || len(freed) != 1 {
		t.Fatalf("node-a releasing its loan from the block of no node: %v, %v", freed, err)
	}
	if freed, err := allocA.Release(ctx, "node-a", imported.ID); err != nil || len(freed) != 0 {
		t.Fatalf("node-a's DEL of an imported address: freed %v, %v; want nothing freed and no error", freed, err)
	}
	if got, err := admin.GetNode(ctx, store.UnaffineNode); err != nil || !hasHandle(got, imported.ID) {
		t.Fatalf("the imported address after node-a's DEL: %v (held %v), want it still held", err, err == nil && hasHandle(got, imported.ID))
	}
	ctrl := allocator.New(openKube(t, s.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-controller"), part), nil)
	if freed, err := ctrl.Release(ctx, "node-a", imported.ID); err != nil || len(freed) != 1 {
		t.Fatalf("the controller's release of the imported address: %v, %v", freed, err)
	}
}

// createPool creates p and waits until the API server's watch cache, which
// an allocation reads its pools from, has it.
func createPool(ctx context.Context, t *testing.T, s *kube.Store, p ipam.Pool) {
	t.Helper()
	if _, err := s.CreatePool(ctx, store.Pool{Spec: p}); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := s.GetPoolCached(ctx, p.Name)
		if err == nil {
			return
		}
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pool %s never in the watch cache: %v", p.Name, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func hasHandle(n store.Node, id string) bool {
	_, ok := n.Handle(id)
	return ok
}
