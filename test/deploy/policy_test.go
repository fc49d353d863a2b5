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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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

// TestNodeWritesRefused: under deploy/'s RBAC and node-writes policy,
// node-a's credentials (a token bound to a pod on node-a) may not create,
// update or delete node-b's IPAMNode or IPAMBlock, nor write another
// node's object beyond adding and removing the records of node-a's own
// handles (a loan), nor name an object for another node or block; a token
// of the same ServiceAccount bound to no pod writes nothing; the
// controller's ServiceAccount writes every node's objects.
func TestNodeWritesRefused(t *testing.T) {
	s := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	part := authzPartition("refused")
	admin := openKube(t, s.AdminKubeconfig, part)
	if _, err := admin.CreatePool(ctx, store.Pool{Spec: authzPool}); err != nil {
		t.Fatal(err)
	}
	kcA := s.NodeKubeconfig(t, "node-a")
	nodeA := openKube(t, kcA, part)
	dynA := dynamicFor(t, kcA)

	// node-b's block, object and a record of its own, as node-b wrote them.
	blockB, blockA := authzPool.BlockAt(0), authzPool.BlockAt(1)
	claimB, err := admin.CreateClaim(ctx, store.Claim{BlockRef: store.BlockRef{Pool: authzPool.Name, CIDR: blockB}, Node: "node-b"})
	if err != nil {
		t.Fatal(err)
	}
	nb := nodealloc.AddBlock(store.Node{Name: "node-b"}, authzPool, blockB)
	nb, _, err = nodealloc.Take(nb, authzPool, ipam.Handle{ID: "authz.b1.eth0", Network: "authz", ContainerID: "b1", IfName: "eth0", Node: "node-b"})
	if err != nil {
		t.Fatal(err)
	}
	if nb, err = admin.CreateNode(ctx, nb); err != nil {
		t.Fatal(err)
	}

	t.Run("own", func(t *testing.T) {
		c, err := nodeA.CreateClaim(ctx, store.Claim{BlockRef: store.BlockRef{Pool: authzPool.Name, CIDR: blockA}, Node: "node-a"})
		allowed(t, "node-a claims a block for itself", err)
		na, err := nodeA.CreateNode(ctx, nodealloc.AddBlock(store.Node{Name: "node-a"}, authzPool, blockA))
		allowed(t, "node-a creates its object", err)
		na, _, err = nodealloc.Take(na, authzPool, ipam.Handle{ID: "authz.a1.eth0", Network: "authz", ContainerID: "a1", IfName: "eth0", Node: "node-a"})
		if err != nil {
			t.Fatal(err)
		}
		na, err = nodeA.UpdateNode(ctx, na)
		allowed(t, "node-a updates its object", err)
		allowed(t, "node-a deletes its object", nodeA.DeleteNode(ctx, na))
		allowed(t, "node-a deletes its claim", nodeA.DeleteClaim(ctx, c))
	})

	t.Run("other node's through the datastore", func(t *testing.T) {
		_, err := nodeA.CreateNode(ctx, nodealloc.AddBlock(store.Node{Name: "node-c"}, authzPool, blockA))
		denied(t, "node-a creates node-c's object", err)
		_, err = nodeA.CreateClaim(ctx, store.Claim{BlockRef: store.BlockRef{Pool: authzPool.Name, CIDR: blockA}, Node: "node-b"})
		denied(t, "node-a creates a claim naming node-b", err)
		denied(t, "node-a deletes node-b's claim", nodeA.DeleteClaim(ctx, claimB))
		freed, _ := nodealloc.Release(nb, "authz.b1.eth0")
		_, err = nodeA.UpdateNode(ctx, freed)
		denied(t, "node-a frees node-b's address in node-b's object", err)
		_, err = nodeA.UpdateNode(ctx, nodealloc.AddBlock(nb, authzPool, blockA))
		denied(t, "node-a inserts a block into node-b's object", err)
		denied(t, "node-a deletes node-b's object", nodeA.DeleteNode(ctx, nb))
		if got, err := admin.GetNode(ctx, "node-b"); err != nil || got.Version != nb.Version {
			t.Fatalf("node-b's object after node-a's refused writes: version %s (was %s), %v", got.Version, nb.Version, err)
		}
	})

	// The loan node-a may write: a record of its own handle and the
	// address it takes out of the free queue.
	loan, _, err := nodealloc.Take(nb, authzPool, ipam.Handle{ID: "authz.a2.eth0", Network: "authz", ContainerID: "a2", IfName: "eth0", Node: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	if loan, err = nodeA.UpdateNode(ctx, loan); err != nil {
		t.Fatalf("node-a's loan from node-b's block: %v", err)
	}
	back, _ := nodealloc.Release(loan, "authz.a2.eth0")
	if _, err := nodeA.UpdateNode(ctx, back); err != nil {
		t.Fatalf("node-a's release of its loan: %v", err)
	}

	t.Run("other node's object, raw", func(t *testing.T) {
		objName := part + ".node-b"
		edit := func(what string, want func(*testing.T, string, error), change func(o *unstructured.Unstructured)) {
			t.Helper()
			o, err := dynA.Resource(ipamNodesGVR).Get(ctx, objName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			change(o)
			_, err = dynA.Resource(ipamNodesGVR).Update(ctx, o, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
			want(t, what, err)
		}
		records := func(o *unstructured.Unstructured) []any {
			r, _, _ := unstructured.NestedSlice(o.Object, "spec", "records")
			return r
		}
		setRecords := func(o *unstructured.Unstructured, r []any) {
			if err := unstructured.SetNestedSlice(o.Object, r, "spec", "records"); err != nil {
				t.Fatal(err)
			}
		}
		setFree := func(o *unstructured.Unstructured, free string) {
			blocks, _, _ := unstructured.NestedSlice(o.Object, "spec", "blocks")
			blocks[0].(map[string]any)["free"] = free
			if err := unstructured.SetNestedSlice(o.Object, blocks, "spec", "blocks"); err != nil {
				t.Fatal(err)
			}
		}
		edit("node-a adds its record with the address it takes", allowed, func(o *unstructured.Unstructured) {
			setRecords(o, append(records(o), "authz.a3.eth0 10.61.0.7@authz node=node-a"))
			setFree(o, "2-6")
		})
		edit("node-a adds a record of node-c's", denied, func(o *unstructured.Unstructured) {
			setRecords(o, append(records(o), "authz.c1.eth0 10.61.0.7@authz node=node-c"))
			setFree(o, "2-6")
		})
		edit("node-a adds a record of node-b's", denied, func(o *unstructured.Unstructured) {
			setRecords(o, append(records(o), "authz.b9.eth0 10.61.0.7@authz"))
			setFree(o, "2-6")
		})
		edit("node-a drops node-b's record", denied, func(o *unstructured.Unstructured) {
			setRecords(o, []any{})
			setFree(o, "1-7")
		})
		edit("node-a inserts a block with its record into node-b's object", denied, func(o *unstructured.Unstructured) {
			blocks, _, _ := unstructured.NestedSlice(o.Object, "spec", "blocks")
			blocks = append(blocks, map[string]any{"pool": "authz", "cidr": blockA.String(), "free": "0-6"})
			_ = unstructured.SetNestedSlice(o.Object, blocks, "spec", "blocks")
			setRecords(o, append(records(o), "authz.a3.eth0 10.61.0.15@authz node=node-a"))
		})
		edit("node-a rewrites the free queue of a block it takes nothing from", denied, func(o *unstructured.Unstructured) {
			setFree(o, "7,2-6")
		})
		edit("node-a adds a record in the old format to node-b's object", denied, func(o *unstructured.Unstructured) {
			_ = unstructured.SetNestedSlice(o.Object, []any{map[string]any{"id": "authz.b7.eth0",
				"ips": []any{map[string]any{"addr": "10.61.0.7", "pool": "authz"}}}}, "spec", "handles")
		})
		edit("node-a changes spec.node", denied, func(o *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(o.Object, "node-a", "spec", "node")
		})
		edit("node-a adds a loan to node-b's object", denied, func(o *unstructured.Unstructured) {
			_ = unstructured.SetNestedSlice(o.Object, []any{map[string]any{"handle": "x", "lender": "node-a"}}, "spec", "loans")
		})
		edit("node-a labels node-b's object as lending to it", allowed, func(o *unstructured.Unstructured) {
			o.SetLabels(withLabel(o.GetLabels(), kube.LendsPrefix+"node-a"))
		})
		edit("node-a labels node-b's object as lending to node-c", denied, func(o *unstructured.Unstructured) {
			o.SetLabels(withLabel(o.GetLabels(), kube.LendsPrefix+"node-c"))
		})
		edit("node-a drops node-b's partition label", denied, func(o *unstructured.Unstructured) {
			o.SetLabels(nil)
		})
		edit("node-a gives node-b's object an owner", denied, func(o *unstructured.Unstructured) {
			o.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "0f0e0d0c-0000-4000-8000-000000000001"}})
		})
		edit("node-a puts a finalizer on node-b's object", denied, func(o *unstructured.Unstructured) {
			o.SetFinalizers([]string{"example.com/hold"})
		})
	})

	t.Run("names", func(t *testing.T) {
		create := func(what string, want func(*testing.T, string, error), gvr schema.GroupVersionResource, kind, name, partition string, spec map[string]any) {
			t.Helper()
			o := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "ipkeeper.io/v1beta1", "kind": kind,
				"metadata": map[string]any{"name": name}, "spec": spec}}
			if partition != "" {
				o.SetLabels(map[string]string{kube.LabelPartition: partition})
			}
			_, err := dynA.Resource(gvr).Create(ctx, o, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			want(t, what, err)
		}
		nodeSpec := func(node string) map[string]any {
			return map[string]any{"node": node, "blocks": []any{}, "records": []any{}}
		}
		create("node-a's object under node-b's name", denied, ipamNodesGVR, "IPAMNode", part+"x.node-b", part+"x", nodeSpec("node-a"))
		create("node-a's object under its name", allowed, ipamNodesGVR, "IPAMNode", part+"x.node-a", part+"x", nodeSpec("node-a"))
		create("node-a's unpartitioned object under its name", allowed, ipamNodesGVR, "IPAMNode", "node-a", "", nodeSpec("node-a"))
		create("node-a's object named for another partition", denied, ipamNodesGVR, "IPAMNode", part+"y.node-a", part+"x", nodeSpec("node-a"))
		block := func(pool, cidr string) map[string]any {
			return map[string]any{"pool": pool, "cidr": cidr, "node": "node-a"}
		}
		create("a claim under its block's name", allowed, ipamBlocksGVR, "IPAMBlock", part+".authz.10-61-1-0-29", part, block("authz", "10.61.1.0/29"))
		create("a claim under another block's name", denied, ipamBlocksGVR, "IPAMBlock", part+".authz.10-61-1-0-29", part, block("authz", "10.61.1.8/29"))
		create("a claim under another pool's name", denied, ipamBlocksGVR, "IPAMBlock", part+".other.10-61-1-0-29", part, block("authz", "10.61.1.0/29"))
		create("an IPv6 claim under its block's name", allowed, ipamBlocksGVR, "IPAMBlock", part+".authz6.fd00-61--100-120", part, block("authz6", "fd00:61::100/120"))
		create("an IPv6 claim of a block written uncanonically", denied, ipamBlocksGVR, "IPAMBlock", part+".authz6.fd00-61-0--100-120", part, block("authz6", "fd00:61:0::100/120"))
		create("a claim of ::/120", allowed, ipamBlocksGVR, "IPAMBlock", part+".authz6.0---120", part, block("authz6", "::/120"))
		hashedPool := "kube-fd70--120--zatoab2ltfrumece" // how a pool named "kube-fd70::-120" is named
		create("a claim of a pool with a hashed name", allowed, ipamBlocksGVR, "IPAMBlock", part+"."+hashedPool+".fd70---122", part, block("kube-fd70::-120", "fd70::/122"))
		create("a claim of a pool with a hashed name, under another block's name", denied, ipamBlocksGVR, "IPAMBlock", part+"."+hashedPool+".fd70--40-122", part, block("kube-fd70::-120", "fd70::/122"))
		create("a claim whose pool part is neither its pool nor hashed", denied, ipamBlocksGVR, "IPAMBlock", part+".other.fd70---122", part, block("kube-fd70::-120", "fd70::/122"))
	})

	t.Run("unbound token", func(t *testing.T) {
		unbound := openKube(t, s.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-node"), part)
		_, err := unbound.CreateNode(ctx, nodealloc.AddBlock(store.Node{Name: "node-a"}, authzPool, blockA))
		denied(t, "an unbound token creates node-a's object", err)
		if err == nil || !strings.Contains(err.Error(), "carry no node") {
			t.Errorf("an unbound token's refusal %v does not say that it carries no node", err)
		}
		_, err = unbound.CreateClaim(ctx, store.Claim{BlockRef: store.BlockRef{Pool: authzPool.Name, CIDR: blockA}, Node: "node-a"})
		denied(t, "an unbound token creates a claim", err)
		denied(t, "an unbound token deletes node-b's claim", unbound.DeleteClaim(ctx, claimB))
		if _, err := unbound.GetNode(ctx, "node-b"); err != nil {
			t.Errorf("an unbound token reads node-b's object: %v, want allowed (reads are RBAC's)", err)
		}
	})

	t.Run("controller", func(t *testing.T) {
		ctrl := openKube(t, s.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-controller"), part)
		cur, err := ctrl.GetNode(ctx, "node-b")
		if err != nil {
			t.Fatal(err)
		}
		freed, _ := nodealloc.Release(cur, "authz.b1.eth0")
		freed, err = ctrl.UpdateNode(ctx, freed)
		allowed(t, "the controller frees node-b's address", err)
		allowed(t, "the controller deletes node-b's object", ctrl.DeleteNode(ctx, freed))
		allowed(t, "the controller deletes node-b's claim", ctrl.DeleteClaim(ctx, claimB))
		_, err = ctrl.CreateClaim(ctx, store.Claim{BlockRef: store.BlockRef{Pool: authzPool.Name, CIDR: blockB}, Node: "node-c"})
		allowed(t, "the controller creates a claim naming node-c", err)
	})
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

// TestNodeWritesLargeLender: the node-writes policy's rules on a lender's
// object as large as the datastore writes one (kube.MaxObjectBytes of
// spec) stay within the API server's CEL cost limits: a loan (one record
// of the borrower's own added) is admitted, and a change of another
// record is still refused by the rule, not by an evaluation error.
func TestNodeWritesLargeLender(t *testing.T) {
	s := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	part := authzPartition("large")
	var records []any
	size := 0
	for i := 0; size < kube.MaxObjectBytes-200; i++ {
		r := fmt.Sprintf("net1.%064x.eth0 10.%d.%d.%d@large-pool ns=default pod=web-%06d", i, 63+i>>16, i>>8&255, i&255, i)
		records = append(records, r)
		size += len(r) + 3
	}
	lender := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "ipkeeper.io/v1beta1", "kind": "IPAMNode",
		"metadata": map[string]any{"name": part + ".node-big", "labels": map[string]any{kube.LabelPartition: part}},
		"spec": map[string]any{"node": "node-big", "records": records,
			"blocks": []any{map[string]any{"pool": "large-pool", "cidr": "10.70.0.0/26", "free": "0-63"}}}}}
	if _, err := dynamicFor(t, s.AdminKubeconfig).Resource(ipamNodesGVR).Create(ctx, lender, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dynA := dynamicFor(t, s.NodeKubeconfig(t, "node-a"))
	edit := func(what string, want func(*testing.T, string, error), change func(o *unstructured.Unstructured)) {
		t.Helper()
		o, err := dynA.Resource(ipamNodesGVR).Get(ctx, part+".node-big", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		change(o)
		start := time.Now()
		_, err = dynA.Resource(ipamNodesGVR).Update(ctx, o, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		t.Logf("%s (%d records, %d bytes): answered in %v", what, len(records), size, time.Since(start).Round(time.Millisecond))
		want(t, what, err)
	}
	edit("node-a borrows from the large object", allowed, func(o *unstructured.Unstructured) {
		_ = unstructured.SetNestedSlice(o.Object, append(slices.Clone(records), "net1.a1.eth0 10.70.0.5@large-pool node=node-a"), "spec", "records")
		_ = unstructured.SetNestedSlice(o.Object, []any{map[string]any{"pool": "large-pool", "cidr": "10.70.0.0/26", "free": "0-4,6-63"}}, "spec", "blocks")
	})
	edit("node-a drops the large object's last record", denied, func(o *unstructured.Unstructured) {
		_ = unstructured.SetNestedSlice(o.Object, records[:len(records)-1], "spec", "records")
	})
}
