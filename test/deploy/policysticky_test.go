package deploy

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ipkeeper/ipkeeper/internal/store/kube"
)

// TestNodeWritesStickyTake: node-a's credentials take a parked sticky
// record in node-b's IPAMBlock for a record of node-a's handle with the
// same identity (a sticky address moving to node-a), with a
// sticky.ipkeeper.io/ label; never a live sticky record, nor a parked
// one for a record of another identity.
func TestNodeWritesStickyTake(t *testing.T) {
	s := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	part := authzPartition("sticky")
	admin := rawFor(ctx, t, s.AdminKubeconfig, ipamBlocksGVR)
	a := rawFor(ctx, t, s.NodeKubeconfig(t, "node-a"), ipamBlocksGVR)
	v4 := part + ".authz.10-62-0-0-29"
	_, err := admin.res.Create(ctx, blockObject(part, v4, "authz", "10.62.0.0/29", "node-b", "2-7",
		[]string{"authz.b1.eth0 10.62.0.0@authz pod=pg-0 sticky=pod/db/pg-0 parked=2026-11-27T10:00:00Z",
			"authz.b2.eth0 10.62.0.1@authz pod=pg-1 sticky=pod/db/pg-1"}), metav1.CreateOptions{})
	mustAdmin(t, "node-b's block", err)

	a.edit(t, v4, "node-a takes a live sticky record", refusedBy(ruleOthersKept), false, func(o *unstructured.Unstructured) {
		setState(t, o, "2-7", []string{records(o)[0], "authz.a2.eth0 10.62.0.1@authz node=node-a pod=pg-1 sticky=pod/db/pg-1"})
	})
	a.edit(t, v4, "node-a takes a parked record for another identity", refusedBy(ruleOthersKept), false, func(o *unstructured.Unstructured) {
		setState(t, o, "2-7", []string{"authz.a1.eth0 10.62.0.0@authz node=node-a pod=pg-9 sticky=pod/db/pg-9", records(o)[1]})
	})
	a.edit(t, v4, "node-a takes a parked sticky record for its handle of that identity", allowed, false, func(o *unstructured.Unstructured) {
		setState(t, o, "2-7", []string{"authz.a1.eth0 10.62.0.0@authz node=node-a pod=pg-0 sticky=pod/db/pg-0", records(o)[1]})
		o.SetLabels(withLabel(withLabel(o.GetLabels(), kube.LendsPrefix+"node-a"), kube.StickyPrefix+"pg0hash"))
	})
}
