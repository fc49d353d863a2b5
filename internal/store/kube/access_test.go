package kube

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// TestNodeAccountLimits: the ipkeeper-node ServiceAccount (with the RBAC
// deploy/ ships, and a token bound to a pod on node-a), which may do
// everything the backend does on its own node's objects, may do nothing
// else with the datastore's resources:
// no watch, patch or status update, no deleting of the CRDs, no
// secrets.
func TestNodeAccountLimits(t *testing.T) {
	s := kubetest.Require(t, srv)
	st := openAsNode(t, "node-a")
	ctx := ctxT(t)
	n, err := st.CreateNode(ctx, claimed(t, st, dualStackNode(t, "node-a", "node-b")))
	if err != nil {
		t.Fatal(err)
	}
	c, err := st.GetClaim(ctx, store.BlockRef{Pool: "blue", CIDR: netip.MustParsePrefix("10.0.0.64/26")})
	if err != nil {
		t.Fatal(err)
	}
	p, err := st.CreatePool(ctx, store.Pool{Spec: pool4})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", s.NodeKubeconfig(t, "node-a"))
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gvr := func(res string) dynamic.NamespaceableResourceInterface {
		return dyn.Resource(schema.GroupVersionResource{Group: Group, Version: Version, Resource: res})
	}
	if _, err := gvr(ResourceBlocks).Get(ctx, st.names.claim(c.Pool, c.CIDR), metav1.GetOptions{}); err != nil {
		t.Fatalf("GET of a claim as ipkeeper-node: %v", err)
	}
	poolObj, err := gvr(ResourcePools).Get(ctx, st.names.object(p.Spec.Name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"metadata":{"labels":{"x":"y"}}}`)
	refused := map[string]error{}
	_, refused["watch ipamnodes"] = gvr(ResourceNodes).Watch(ctx, metav1.ListOptions{})
	_, refused["patch ipamnode"] = gvr(ResourceNodes).Patch(ctx, st.names.object(n.Name), types.MergePatchType, patch, metav1.PatchOptions{})
	_, refused["update ipampool status"] = gvr(ResourcePools).UpdateStatus(ctx, poolObj, metav1.UpdateOptions{})
	refused["deletecollection ipamnodes"] = gvr(ResourceNodes).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	refused["delete the IPAMNode CRD"] = dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}).
		Delete(ctx, "ipamnodes.ipkeeper.io", metav1.DeleteOptions{})
	_, refused["list secrets"] = dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}).Namespace("kube-system").List(ctx, metav1.ListOptions{})
	for what, err := range refused {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s as ipkeeper-node: %v, want Forbidden", what, err)
		}
	}
	if _, err := st.GetNode(ctx, "node-a"); err != nil {
		t.Fatalf("the node object after the refused requests: %v", err)
	}
}

// TestAccessDenied: a ServiceAccount without the datastore's role gets
// ErrAccessDenied, which is not ErrUnavailable (retrying does not help)
// and names the RBAC to check.
func TestAccessDenied(t *testing.T) {
	s := kubetest.Require(t, srv)
	st, err := Open(Config{Kubeconfig: s.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-test-unbound"), Prefix: "denied"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := ctxT(t)
	_, errGet := st.GetNode(ctx, "node-a")
	_, errCreate := st.CreateClaim(ctx, store.Claim{BlockRef: store.BlockRef{Pool: "blue", CIDR: netip.MustParsePrefix("10.0.0.0/26")}, Node: "node-a"})
	_, errList := st.ListPools(ctx)
	for _, err := range []error{errGet, errCreate, errList} {
		if !errors.Is(err, ErrAccessDenied) || errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "rbac-datastore.yaml") {
			t.Errorf("as an unbound account: %v; want ErrAccessDenied (not ErrUnavailable) naming the RBAC", err)
		}
	}
}

// TestUnavailable: no server, a cancelled context and a resource the
// server does not serve (no CRD) are ErrUnavailable.
func TestUnavailable(t *testing.T) {
	st, err := NewForConfig(&rest.Config{Host: "https://127.0.0.1:1", TLSClientConfig: rest.TLSClientConfig{Insecure: true}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetNode(ctxT(t), "node-a"); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("GetNode with no server: %v, want ErrUnavailable", err)
	}
	live := openStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := live.GetNode(ctx, "node-a"); !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Errorf("GetNode with a cancelled context: %v, want ErrUnavailable wrapping context.Canceled", err)
	}
	_, err = openAdmin(t, "").get(ctxT(t), kind{"ipamnothings", "IPAMNothing"}, "x")
	if !errors.Is(err, ErrNoCRD) || !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("GET of a resource without a CRD: %v, want ErrNoCRD (ErrUnavailable)", err)
	}
	if _, err := live.GetNode(ctxT(t), "absent"); !errors.Is(err, store.ErrNotFound) || errors.Is(err, ErrNoCRD) {
		t.Errorf("GET of an absent object: %v, want ErrNotFound", err)
	}
}

// TestNothingSentWhenRefused: an invalid or too large object is refused
// before anything is sent: against a store with no server behind it the
// error is ErrInvalid or ErrTooLarge, never ErrUnavailable.
func TestNothingSentWhenRefused(t *testing.T) {
	st, err := NewForConfig(&rest.Config{Host: "https://127.0.0.1:1", TLSClientConfig: rest.TLSClientConfig{Insecure: true}}, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	bad := dualStackNode(t, "node-a", "node-b")
	bad.Handles = bad.Handles[1:] // the blocks still name the first handle's addresses
	bad.Version = "7"
	big := nodeOfSize(t, "node-a", MaxObjectBytes+1)
	big.Version = "7"
	badPool := pool4
	badPool.BlockSize = 8
	for what, err := range map[string]error{
		"create invalid node":  second(st.CreateNode(ctx, bad)),
		"update invalid node":  second(st.UpdateNode(ctx, bad)),
		"create too large":     second(st.CreateNode(ctx, big)),
		"update too large":     second(st.UpdateNode(ctx, big)),
		"create invalid pool":  second(st.CreatePool(ctx, store.Pool{Spec: badPool})),
		"update invalid pool":  second(st.UpdatePool(ctx, store.Pool{Spec: badPool, Version: "7"})),
		"claim, unmasked":      second(st.CreateClaim(ctx, store.Claim{BlockRef: store.BlockRef{Pool: "blue", CIDR: netip.PrefixFrom(netip.MustParseAddr("10.0.0.1"), 26)}, Node: "n"})),
		"claim, node with '/'": second(st.CreateClaim(ctx, store.Claim{BlockRef: store.BlockRef{Pool: "blue", CIDR: netip.MustParsePrefix("10.0.0.0/26")}, Node: "a/b"})),
		"get node with '/'":    second(st.GetNode(ctx, "a/b")),
		"list claims of ''\\n": second(st.ListClaims(ctx, store.ClaimSelector{Node: "\n"})),
	} {
		if !errors.Is(err, store.ErrInvalid) && !errors.Is(err, store.ErrTooLarge) || errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s: %v, want ErrInvalid or ErrTooLarge with nothing sent", what, err)
		}
	}
	if err := second(st.CreateNode(ctx, big)); !errors.Is(err, store.ErrTooLarge) {
		t.Errorf("too large: %v, want ErrTooLarge", err)
	}
}

func second[T any](_ T, err error) error { return err }

// nodeOfSize returns a valid node object whose one block's stored spec
// (its IPAMBlock's: claim and state) is exactly size bytes: one /16
// block, records padded with long netns paths.
func nodeOfSize(t testing.TB, name string, size int) store.Node {
	t.Helper()
	p := ipam.Pool{Name: "big", CIDR: netip.MustParsePrefix("10.1.0.0/16"), BlockSize: 16}
	b := ipam.NewBlock(p, p.CIDR, name)
	n := store.Node{Name: name}
	enc := func() int {
		ref := store.BlockRef{Pool: p.Name, CIDR: p.CIDR}
		w := blockWire{Pool: p.Name, CIDR: p.CIDR, Node: name, State: &blockState{Free: store.FormatQueue(n.Blocks[0].Free), Records: map[string]string{}}}
		for _, h := range fragments(n, []store.BlockRef{ref})[ref] {
			hs := store.EncodeHandle(h, name)
			key, rest := splitRecord(store.FormatRecord(&hs))
			w.State.Records[key] = rest
		}
		raw, _ := json.Marshal(w)
		return len(raw)
	}
	pad := strings.Repeat("x", 4000)
	for i := 0; i < 60000; i++ {
		a := b.Addr(i + 1)
		nb, err := b.AssignAddr(p, a, ipam.HandleID("net", "c"+itoa(i), "eth0"))
		if err != nil {
			t.Fatal(err)
		}
		h := ipam.Handle{ID: ipam.HandleID("net", "c"+itoa(i), "eth0"), Network: "net", ContainerID: "c" + itoa(i), IfName: "eth0",
			Node: name, NetNS: "/" + pad, IPs: []ipam.HandleIP{{Addr: a, Pool: p.Name, Block: b.CIDR}}}
		n.Blocks = []ipam.Block{nb}
		n.Handles = append(n.Handles, h)
		if got := enc(); got >= size {
			// Trim the last record's netns to hit size exactly.
			last := &n.Handles[len(n.Handles)-1]
			cut := got - size
			if cut >= len(last.NetNS) {
				t.Fatalf("cannot trim %d bytes", cut)
			}
			last.NetNS = last.NetNS[:len(last.NetNS)-cut]
			if got := enc(); got != size {
				t.Fatalf("node object of %d bytes, want %d", got, size)
			}
			return n
		}
		b = nb
	}
	t.Fatal("node object never reached the size")
	return n
}

// TestSizeLimit: a block whose IPAMBlock's spec is exactly MaxObjectBytes
// is stored by the API server (over etcd's default 1.5 MiB request
// limit: the headroom is real), and read back; one byte more is
// ErrTooLarge.
func TestSizeLimit(t *testing.T) {
	st := openStore(t)
	ctx := ctxT(t)
	n := nodeOfSize(t, "node-big", MaxObjectBytes)
	created, err := st.CreateNode(ctx, claimed(t, st, n))
	if err != nil {
		t.Fatalf("node object of MaxObjectBytes: %v", err)
	}
	got, err := st.GetNode(ctx, "node-big")
	if err != nil {
		t.Fatal(err)
	}
	sameNode(t, got, created)
	over := nodeOfSize(t, "node-big", MaxObjectBytes+1)
	over.Version = created.Version
	if _, err := st.UpdateNode(ctx, over); !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("node object of MaxObjectBytes+1: %v, want ErrTooLarge", err)
	}
	if got, err := st.GetNode(ctx, "node-big"); err != nil || got.Version != created.Version {
		t.Fatalf("after the refused update: version %q, %v; want %q", got.Version, err, created.Version)
	}
}

// TestSelectorsFilterByContent: a label that says more than the content
// (written by the admin, as a hashed label shared by two names would) does
// not put an object in a list it does not belong to.
func TestSelectorsFilterByContent(t *testing.T) {
	st := openStore(t)
	admin := openAdmin(t, st.Prefix())
	ctx := ctxT(t)
	// A claim of node-y labelled as node-x's.
	c := store.Claim{BlockRef: store.BlockRef{Pool: "blue", CIDR: netip.MustParsePrefix("10.0.0.0/26")}, Node: "node-y"}
	spec, _ := json.Marshal(store.ClaimSpec{Pool: c.Pool, CIDR: c.CIDR, Node: c.Node})
	body, _ := admin.newObject(kindBlock, st.names.claim(c.Pool, c.CIDR), map[string]string{LabelNode: "node-x", LabelPool: "blue"}, spec, "")
	if _, err := admin.create(ctx, kindBlock, st.names.claim(c.Pool, c.CIDR), body); err != nil {
		t.Fatal(err)
	}
	if got, err := st.ListClaims(ctx, store.ClaimSelector{Node: "node-x"}); err != nil || len(got) != 0 {
		t.Fatalf("claims of node-x: %+v, %v; want none (the one labelled so is node-y's)", got, err)
	}
	if got, err := st.ListClaims(ctx, store.ClaimSelector{Pool: "blue"}); err != nil || len(got) != 1 || got[0].Node != "node-y" {
		t.Fatalf("claims of pool blue: %+v, %v; want node-y's", got, err)
	}
	// A node object that lends to node-b, its block labelled as lending
	// to node-x too.
	n, err := st.CreateNode(ctx, claimed(t, st, dualStackNode(t, "node-a", "node-b")))
	if err != nil {
		t.Fatal(err)
	}
	b6 := st.names.claim(n.Blocks[1].Pool, n.Blocks[1].CIDR)
	o, err := admin.get(ctx, kindBlock, b6)
	if err != nil {
		t.Fatal(err)
	}
	o.Metadata.Labels[LendsPrefix+"node-x"] = ""
	body, _ = admin.newObjectSummary(kindBlock, b6, o.Metadata.Labels, o.Spec, store.Version(o.Metadata.ResourceVersion), o.Summary)
	if _, err := admin.update(ctx, kindBlock, b6, body); err != nil {
		t.Fatal(err)
	}
	if got, err := st.ListNodes(ctx, store.NodeSelector{LendsTo: "node-x"}); err != nil || len(got) != 0 {
		t.Fatalf("lenders of node-x: %d, %v; want none", len(got), err)
	}
	if got, err := st.ListNodes(ctx, store.NodeSelector{LendsTo: "node-b"}); err != nil || len(got) != 1 {
		t.Fatalf("lenders of node-b: %d, %v; want node-a", len(got), err)
	}
	// The next write recomputes the labels from the content.
	got, err := st.GetNode(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpdateNode(ctx, got); err != nil {
		t.Fatal(err)
	}
	if o, err = admin.get(ctx, kindBlock, b6); err != nil {
		t.Fatal(err)
	}
	if _, ok := o.Metadata.Labels[LendsPrefix+"node-x"]; ok || len(o.Metadata.Labels) != 4 {
		t.Fatalf("labels after an update: %v; want the partition, node, pool and lends.ipkeeper.io/node-b only", o.Metadata.Labels)
	}
}
