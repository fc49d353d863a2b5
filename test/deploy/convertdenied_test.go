package deploy

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// A node object still in the v1alpha1 form (its own node not upgraded
// yet) is converted by its own node or the controller only: another
// node reading it (a borrower reading its lender) gets "unavailable" and
// writes nothing; the controller's read converts it.
func TestConversionOfAnotherNodeRefused(t *testing.T) {
	s := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	part := authzPartition("convert")
	admin := openKube(t, s.AdminKubeconfig, part)
	createPool(ctx, t, admin, authzPool)
	cidr := authzPool.BlockAt(0)
	blocks := rawFor(ctx, t, s.AdminKubeconfig, ipamBlocksGVR)
	nodes := rawFor(ctx, t, s.AdminKubeconfig, ipamNodesGVR)
	blockName := part + ".authz.10-61-0-0-29"
	blocks.create(t, "node-b's claim", mustAdmin, blockObject(part, blockName, authzPool.Name, cidr.String(), "node-b", "", nil), true)
	rec := "authz.b1.eth0 " + cidr.Addr().String() + "@" + authzPool.Name
	old := headObject(part, part+".node-b", "node-b")
	old.Object["spec"].(map[string]any)["blocks"] = []any{map[string]any{"pool": authzPool.Name, "cidr": cidr.String(), "free": "1-7"}}
	old.Object["spec"].(map[string]any)["records"] = []any{rec}
	nodes.create(t, "node-b's object in the v1alpha1 form", mustAdmin, old, true)
	before := nodes.get(t, part+".node-b").GetResourceVersion()

	nodeA := openKube(t, s.NodeKubeconfig(t, "node-a"), part)
	_, err := nodeA.GetNode(ctx, "node-b")
	if !errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrDenied) {
		t.Fatalf("node-a reading node-b's unconverted object: %v; want %v (not %v)", err, store.ErrUnavailable, store.ErrDenied)
	}
	if after := nodes.get(t, part+".node-b").GetResourceVersion(); after != before {
		t.Fatalf("node-a's read changed node-b's IPAMNode (version %s -> %s)", before, after)
	}
	if st, _, _ := unstructured.NestedMap(blocks.get(t, blockName).Object, "spec", "state"); st != nil {
		t.Fatalf("node-a's read wrote node-b's block state: %v", st)
	}
	n, err := admin.GetNode(ctx, "node-b")
	if err != nil {
		t.Fatalf("the controller's read of node-b: %v", err)
	}
	if h, ok := n.Handle("authz.b1.eth0"); !ok || h.IPs[0].Addr != cidr.Addr() {
		t.Fatalf("node-b after conversion holds %+v (present %v)", h, ok)
	}
	if _, err := nodeA.GetNode(ctx, "node-b"); err != nil {
		t.Fatalf("node-a reading node-b once converted: %v", err)
	}
}
