package deploy

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ipkeeper/ipkeeper/internal/store/kube"
)

// TestNodeWritesBlocks: under deploy/'s RBAC and node-writes policy,
// node-a's credentials create, update (its state, the records of any
// handle) and delete the IPAMBlocks whose spec.node names node-a, IPv4
// and IPv6, a pool with a hashed name too; they do not create or delete
// a block naming another node, name a block for another pool or CIDR, or
// change a block's pool, CIDR or node (not even of its own block).
func TestNodeWritesBlocks(t *testing.T) {
	s := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	part := authzPartition("blocks")
	admin := rawFor(ctx, t, s.AdminKubeconfig, ipamBlocksGVR)
	a := rawFor(ctx, t, s.NodeKubeconfig(t, "node-a"), ipamBlocksGVR)
	bName := part + ".authz.10-61-0-0-29"
	_, err := admin.res.Create(ctx, blockObject(part, bName, "authz", "10.61.0.0/29", "node-b", "1-7", []string{"authz.b1.eth0 10.61.0.0@authz"}), metav1.CreateOptions{})
	mustAdmin(t, "node-b's block", err)

	// node-a's own blocks: claimed, used, written, released.
	v4 := part + ".authz.10-61-0-8-29"
	a.create(t, "node-a claims an IPv4 block", allowed, blockObject(part, v4, "authz", "10.61.0.8/29", "node-a", "", nil), true)
	a.edit(t, v4, "node-a writes its block's state (a record of a borrower's too)", allowed, true, func(o *unstructured.Unstructured) {
		setState(t, o, "2-7", []string{"authz.a1.eth0 10.61.0.8@authz", "authz.c1.eth0 10.61.0.9@authz node=node-c"})
	})
	a.edit(t, v4, "node-a releases an address of its block", allowed, false, func(o *unstructured.Unstructured) {
		setState(t, o, "2-7,0", dropped(records(o), "authz.a1.eth0"))
	})
	a.edit(t, v4, "node-a hands its block to node-b", refusedBy(ruleClaimKept), false, func(o *unstructured.Unstructured) {
		setSpec(t, o, "node-b", "node")
	})
	a.edit(t, v4, "node-a moves its block to another CIDR (refused by its name too)", denied, false, func(o *unstructured.Unstructured) {
		setSpec(t, o, "10.61.0.16/29", "cidr")
	})
	a.remove(t, v4, "node-a deletes its block", allowed, true)
	v6 := part + "." + hashedPoolPart + ".fd70---122"
	a.create(t, "node-a claims an IPv6 block of a pool with a hashed name, with its state", allowed,
		blockObject(part, v6, hashedPool, hashedPoolBlock, "node-a", "1-63", []string{"k6.a1.eth0 fd70::@" + hashedPool}), true)
	a.edit(t, v6, "node-a takes another address of its IPv6 block", allowed, false, func(o *unstructured.Unstructured) {
		setState(t, o, "2-63", append(records(o), "k6.a2.eth0 fd70::1@"+hashedPool))
	})
	a.edit(t, v6, "node-a moves its IPv6 block to another pool (the hashed pool part is not checked)", refusedBy(ruleClaimKept), false, func(o *unstructured.Unstructured) {
		setSpec(t, o, "kube-fd70::-121", "pool")
	})
	a.remove(t, v6, "node-a deletes its IPv6 block", allowed, true)

	// Another node's blocks.
	a.create(t, "node-a creates a block naming node-b", refusedBy(ruleBlockOwner),
		blockObject(part, part+".authz.10-61-0-8-29", "authz", "10.61.0.8/29", "node-b", "", nil), false)
	a.create(t, "node-a creates a block with state naming node-b", refusedBy(ruleBlockOwner),
		blockObject(part, part+".authz.10-61-0-8-29", "authz", "10.61.0.8/29", "node-b", "1-7", []string{"authz.a1.eth0 10.61.0.8@authz node=node-a"}), false)
	a.remove(t, bName, "node-a deletes node-b's block", refusedBy(ruleBlockOwner), false)
	a.edit(t, bName, "node-a takes node-b's block", refusedBy(ruleClaimKept), false, func(o *unstructured.Unstructured) {
		setSpec(t, o, "node-a", "node")
	})

	// Names: "<pool>.<CIDR with '-'>", the pool part hashed when the pool
	// name is not a DNS name.
	block := func(name, pool, cidr string) *unstructured.Unstructured {
		return blockObject(part, part+"."+name, pool, cidr, "node-a", "", nil)
	}
	a.create(t, "a claim under its block's name", allowed, block("authz.10-61-1-0-29", "authz", "10.61.1.0/29"), false)
	a.create(t, "a claim under another block's name", refusedBy(ruleBlockName), block("authz.10-61-1-0-29", "authz", "10.61.1.8/29"), false)
	a.create(t, "a claim under another pool's name", refusedBy(ruleBlockName), block("other.10-61-1-0-29", "authz", "10.61.1.0/29"), false)
	a.create(t, "an IPv6 claim under its block's name", allowed, block("authz6.fd00-61--100-120", "authz6", "fd00:61::100/120"), false)
	a.create(t, "an IPv6 claim of a block written uncanonically", refusedBy(ruleBlockName), block("authz6.fd00-61-0--100-120", "authz6", "fd00:61:0::100/120"), false)
	a.create(t, "a claim of ::/120", allowed, block("authz6.0---120", "authz6", "::/120"), false)
	a.create(t, "a claim of a pool with a hashed name", allowed, block(hashedPoolPart+".fd70---122", hashedPool, hashedPoolBlock), false)
	a.create(t, "a claim of a pool with a hashed name, under another block's name", refusedBy(ruleBlockName), block(hashedPoolPart+".fd70--40-122", hashedPool, hashedPoolBlock), false)
	a.create(t, "a claim whose pool part is neither its pool nor hashed", refusedBy(ruleBlockName), block("other.fd70---122", hashedPool, hashedPoolBlock), false)
}

// TestNodeWritesBorrow: node-a's credentials update node-b's IPAMBlock
// (IPv4, and IPv6 of a pool with a hashed name) only to add or remove
// the records of node-a's handles ("node=node-a"), with the free queue,
// the summary and its own lends label, by PUT or JSON Patch: the other
// records stay as they are under their keys, the free queue stays unless
// its records change, the
// other labels, owner references and finalizers stay.
func TestNodeWritesBorrow(t *testing.T) {
	s := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	part := authzPartition("borrow")
	admin := rawFor(ctx, t, s.AdminKubeconfig, ipamBlocksGVR)
	a := rawFor(ctx, t, s.NodeKubeconfig(t, "node-a"), ipamBlocksGVR)
	v4 := part + ".authz.10-61-0-0-29"
	_, err := admin.res.Create(ctx, blockObject(part, v4, "authz", "10.61.0.0/29", "node-b", "3-7",
		[]string{"authz.b1.eth0 10.61.0.0@authz", "authz.b2.eth0 10.61.0.1@authz pod=web", "authz.a1.eth0 10.61.0.2@authz node=node-a"}, "node-a"), metav1.CreateOptions{})
	mustAdmin(t, "node-b's IPv4 block", err)
	v6 := part + "." + hashedPoolPart + ".fd70---122"
	_, err = admin.res.Create(ctx, blockObject(part, v6, hashedPool, hashedPoolBlock, "node-b", "1-63",
		[]string{"k6.b1.eth0 fd70::@" + hashedPool}), metav1.CreateOptions{})
	mustAdmin(t, "node-b's IPv6 block", err)

	a.edit(t, v4, "node-a adds its record with the address it takes", allowed, false, func(o *unstructured.Unstructured) {
		setState(t, o, "4-7", append(records(o), "authz.a2.eth0 10.61.0.3@authz node=node-a"))
	})
	a.edit(t, v4, "node-a removes its record, the address back in the free queue, and its lends label", allowed, false, func(o *unstructured.Unstructured) {
		setState(t, o, "3-7,2", dropped(records(o), "authz.a1.eth0"))
		o.SetLabels(map[string]string{kube.LabelPartition: part, kube.LabelNode: "node-b", kube.LabelPool: "authz"})
	})
	a.edit(t, v6, "node-a borrows from an IPv6 block, labeling it as lending to it", allowed, false, func(o *unstructured.Unstructured) {
		setState(t, o, "1-4,6-63", append(records(o), "k6.a1.eth0 fd70::5@"+hashedPool+" node=node-a"))
		o.SetLabels(withLabel(o.GetLabels(), kube.LendsPrefix+"node-a"))
	})

	// The records of other handles.
	a.edit(t, v4, "node-a adds a record of node-c's", refusedBy(ruleOthersKept), false, func(o *unstructured.Unstructured) {
		setState(t, o, "4-7", append(records(o), "authz.c1.eth0 10.61.0.3@authz node=node-c"))
	})
	a.edit(t, v4, "node-a adds a record of node-b's", refusedBy(ruleOthersKept), false, func(o *unstructured.Unstructured) {
		setState(t, o, "4-7", append(records(o), "authz.b9.eth0 10.61.0.3@authz"))
	})
	a.edit(t, v4, "node-a turns its record into node-c's", refusedBy(ruleOthersKept), false, func(o *unstructured.Unstructured) {
		setState(t, o, "3-7", append(records(o), "authz.a1.eth0 10.61.0.2@authz node=node-c"))
	})
	a.edit(t, v4, "node-a adds its record and frees node-b's address", refusedBy(ruleOthersKept), false, func(o *unstructured.Unstructured) {
		setState(t, o, "4-7,0", append(dropped(records(o), "authz.b1.eth0"), "authz.a2.eth0 10.61.0.3@authz node=node-a"))
	})
	a.edit(t, v4, "node-a drops node-b's record", refusedBy(ruleOthersKept), false, func(o *unstructured.Unstructured) {
		setState(t, o, "3-7,0", dropped(records(o), "authz.b1.eth0"))
	})
	a.edit(t, v4, "node-a changes node-b's record", refusedBy(ruleOthersKept), false, func(o *unstructured.Unstructured) {
		setState(t, o, "3-7", append(records(o), "authz.b2.eth0 10.61.0.1@authz pod=db"))
	})
	a.edit(t, v4, "node-a moves node-b's record under another handle's ID", refusedBy(ruleOthersKept), false, func(o *unstructured.Unstructured) {
		setState(t, o, "3-7", append(dropped(records(o), "authz.b1.eth0"), "authz.b7.eth0 10.61.0.0@authz"))
	})
	a.edit(t, v4, "node-a moves its own record under a key of node-b's", refusedBy(ruleOthersKept), false, func(o *unstructured.Unstructured) {
		setState(t, o, "3-7", append(dropped(records(o), "authz.a1.eth0"), "authz.b1.eth0 10.61.0.2@authz node=node-a"))
	})

	// The same as JSON Patches (what the datastore sends): admission
	// judges the object as patched.
	a.patch(t, v4, "node-a patches in its record with the address it takes", allowed, false,
		`[{"op":"add","path":"/spec/state/free","value":"4-7"},{"op":"add","path":"/spec/state/records/authz.a2.eth0","value":"10.61.0.3@authz node=node-a"}]`)
	a.patch(t, v4, "node-a patches out its record", allowed, false,
		`[{"op":"add","path":"/spec/state/free","value":"3-7,2"},{"op":"remove","path":"/spec/state/records/authz.a1.eth0"}]`)
	a.patch(t, v4, "node-a patches in a record of node-c's", refusedBy(ruleOthersKept), false,
		`[{"op":"add","path":"/spec/state/free","value":"4-7"},{"op":"add","path":"/spec/state/records/authz.c1.eth0","value":"10.61.0.3@authz node=node-c"}]`)
	a.patch(t, v4, "node-a patches out node-b's record", refusedBy(ruleOthersKept), false,
		`[{"op":"add","path":"/spec/state/free","value":"3-7,0"},{"op":"remove","path":"/spec/state/records/authz.b1.eth0"}]`)
	a.patch(t, v4, "node-a patches the free queue alone", refusedBy(ruleFreeKept), false,
		`[{"op":"add","path":"/spec/state/free","value":"7,3-6"}]`)
	a.edit(t, v4, "node-a drops node-b's block state", refusedBy(ruleOthersKept), false, func(o *unstructured.Unstructured) {
		unstructured.RemoveNestedField(o.Object, "spec", "state")
	})
	a.edit(t, v6, "node-a drops node-b's record of an IPv6 block", refusedBy(ruleOthersKept), false, func(o *unstructured.Unstructured) {
		setState(t, o, "0-63", nil)
	})

	// The free queue, the claim, labels and metadata.
	a.edit(t, v4, "node-a rewrites the free queue of a block it takes nothing from", refusedBy(ruleFreeKept), false, func(o *unstructured.Unstructured) {
		setFree(t, o, "7,3-6")
	})
	a.edit(t, v6, "node-a empties the free queue of an IPv6 block it takes nothing from", refusedBy(ruleFreeKept), false, func(o *unstructured.Unstructured) {
		setFree(t, o, "")
	})
	a.edit(t, v4, "node-a changes the block's node", refusedBy(ruleClaimKept), false, func(o *unstructured.Unstructured) {
		setSpec(t, o, "node-c", "node")
	})
	a.edit(t, v6, "node-a changes the pool of a block of a pool with a hashed name", refusedBy(ruleClaimKept), false, func(o *unstructured.Unstructured) {
		setSpec(t, o, "kube-fd70::-121", "pool")
	})
	a.edit(t, v4, "node-a labels node-b's block as lending to node-c", refusedBy(ruleLabelsKept), false, func(o *unstructured.Unstructured) {
		o.SetLabels(withLabel(o.GetLabels(), kube.LendsPrefix+"node-c"))
	})
	a.edit(t, v4, "node-a relabels node-b's block as node-a's", refusedBy(ruleLabelsKept), false, func(o *unstructured.Unstructured) {
		l := o.GetLabels()
		l[kube.LabelNode] = "node-a"
		o.SetLabels(l)
	})
	a.edit(t, v6, "node-a drops the pool label of node-b's block", refusedBy(ruleLabelsKept), false, func(o *unstructured.Unstructured) {
		l := o.GetLabels()
		delete(l, kube.LabelPool)
		o.SetLabels(l)
	})
	a.edit(t, v4, "node-a gives node-b's block an owner", refusedBy(ruleMetaKept), false, func(o *unstructured.Unstructured) {
		o.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "0f0e0d0c-0000-4000-8000-000000000001"}})
	})
	a.edit(t, v4, "node-a puts a finalizer on node-b's block", refusedBy(ruleMetaKept), false, func(o *unstructured.Unstructured) {
		o.SetFinalizers([]string{"example.com/hold"})
	})
	a.remove(t, v6, "node-a deletes node-b's IPv6 block", refusedBy(ruleBlockOwner), false)
	if o := admin.get(t, v4); !slices.Equal(records(o), []string{"authz.a1.eth0 10.61.0.2@authz node=node-a", "authz.b1.eth0 10.61.0.0@authz", "authz.b2.eth0 10.61.0.1@authz pod=web"}) {
		t.Fatalf("node-b's block after node-a's dry runs: %v", records(o))
	}
}

// TestNodeWritesHeads: node-a's credentials create, update and delete
// node-a's IPAMNode (its head: node and loans), under its own name,
// partitioned or not, and rewrite one of the v1alpha1 form as a head;
// they do not write another node's, name one for another node or
// partition, or write blocks, records or handles into one.
func TestNodeWritesHeads(t *testing.T) {
	s := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	part := authzPartition("heads")
	admin := rawFor(ctx, t, s.AdminKubeconfig, ipamNodesGVR)
	a := rawFor(ctx, t, s.NodeKubeconfig(t, "node-a"), ipamNodesGVR)
	bName, aName := part+".node-b", part+".node-a"
	_, err := admin.res.Create(ctx, headObject(part, bName, "node-b"), metav1.CreateOptions{})
	mustAdmin(t, "node-b's head", err)
	loan := map[string]any{"handle": "authz.a1.eth0", "lender": "node-b"}

	a.create(t, "node-a creates its head", allowed, headObject(part, aName, "node-a"), true)
	a.edit(t, aName, "node-a adds a loan to its head", allowed, true, func(o *unstructured.Unstructured) {
		setSpec(t, o, []any{loan}, "loans")
	})
	a.edit(t, aName, "node-a writes its head with the v1alpha1 fields empty", allowed, false, func(o *unstructured.Unstructured) {
		setSpec(t, o, []any{}, "blocks")
		setSpec(t, o, []any{}, "records")
		setSpec(t, o, []any{}, "handles")
	})
	a.edit(t, aName, "node-a writes records into its head", refusedBy(ruleHeadOnly), false, func(o *unstructured.Unstructured) {
		setSpec(t, o, []any{"authz.a1.eth0 10.61.0.8@authz"}, "records")
	})
	a.edit(t, aName, "node-a writes blocks into its head", refusedBy(ruleHeadOnly), false, func(o *unstructured.Unstructured) {
		setSpec(t, o, []any{map[string]any{"pool": "authz", "cidr": "10.61.0.8/29", "free": "0-7"}}, "blocks")
	})
	a.edit(t, aName, "node-a writes handles into its head", refusedBy(ruleHeadOnly), false, func(o *unstructured.Unstructured) {
		setSpec(t, o, []any{map[string]any{"id": "authz.a1.eth0", "ips": []any{map[string]any{"addr": "10.61.0.8", "pool": "authz"}}}}, "handles")
	})
	a.edit(t, aName, "node-a hands its head to node-b", refusedBy(ruleHeadOwner), false, func(o *unstructured.Unstructured) {
		setSpec(t, o, "node-b", "node")
	})
	a.remove(t, aName, "node-a deletes its head", allowed, true)
	withRecords := headObject(part, aName, "node-a")
	setSpec(t, withRecords, []any{"authz.a1.eth0 10.61.0.8@authz"}, "records")
	a.create(t, "node-a creates its head with records", refusedBy(ruleHeadOnly), withRecords, false)
	withBlocks := headObject(part, aName, "node-a")
	setSpec(t, withBlocks, []any{map[string]any{"pool": "authz", "cidr": "10.61.0.8/29", "free": "0-7"}}, "blocks")
	a.create(t, "node-a creates its head with blocks", refusedBy(ruleHeadOnly), withBlocks, false)

	// An object of the v1alpha1 form, rewritten as a head by its node.
	_, err = admin.res.Create(ctx, withBlocks, metav1.CreateOptions{})
	mustAdmin(t, "node-a's object of the v1alpha1 form", err)
	a.edit(t, aName, "node-a rewrites its object of the v1alpha1 form as a head", allowed, true, func(o *unstructured.Unstructured) {
		unstructured.RemoveNestedField(o.Object, "spec", "blocks")
		setSpec(t, o, []any{loan}, "loans")
	})

	// Another node's head.
	a.create(t, "node-a creates node-c's head", refusedBy(ruleHeadOwner), headObject(part, part+".node-c", "node-c"), false)
	a.edit(t, bName, "node-a adds a loan to node-b's head", refusedBy(ruleHeadOwner), false, func(o *unstructured.Unstructured) {
		setSpec(t, o, []any{map[string]any{"handle": "x", "lender": "node-a"}}, "loans")
	})
	a.edit(t, bName, "node-a takes node-b's head", refusedBy(ruleHeadOwner), false, func(o *unstructured.Unstructured) {
		setSpec(t, o, "node-a", "node")
	})
	a.remove(t, bName, "node-a deletes node-b's head", refusedBy(ruleHeadOwner), false)

	// Names: "<partition>.<node>", or the node's name unpartitioned.
	a.create(t, "node-a's head under node-b's name", refusedBy(ruleHeadName), headObject(part+"x", part+"x.node-b", "node-a"), false)
	a.create(t, "node-a's head under its name", allowed, headObject(part+"x", part+"x.node-a", "node-a"), false)
	a.create(t, "node-a's unpartitioned head under its name", allowed, headObject("", "node-a", "node-a"), false)
	a.create(t, "node-a's head named for another partition", refusedBy(ruleHeadName), headObject(part+"x", part+"y.node-a", "node-a"), false)
}

// TestNodeWritesOtherIdentities: a token of ipkeeper-node bound to no pod
// writes nothing (and reads, as RBAC grants); the controller's account
// writes every node's objects.
func TestNodeWritesOtherIdentities(t *testing.T) {
	s := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	part := authzPartition("identities")
	adminBlocks := rawFor(ctx, t, s.AdminKubeconfig, ipamBlocksGVR)
	adminHeads := rawFor(ctx, t, s.AdminKubeconfig, ipamNodesGVR)
	bBlock, bHead := part+".authz.10-61-0-0-29", part+".node-b"
	_, err := adminBlocks.res.Create(ctx, blockObject(part, bBlock, "authz", "10.61.0.0/29", "node-b", "1-7", []string{"authz.b1.eth0 10.61.0.0@authz"}), metav1.CreateOptions{})
	mustAdmin(t, "node-b's block", err)
	_, err = adminHeads.res.Create(ctx, headObject(part, bHead, "node-b"), metav1.CreateOptions{})
	mustAdmin(t, "node-b's head", err)

	t.Run("unbound token", func(t *testing.T) {
		kc := s.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-node")
		blocks, heads := rawFor(ctx, t, kc, ipamBlocksGVR), rawFor(ctx, t, kc, ipamNodesGVR)
		heads.create(t, "an unbound token creates node-a's head", refusedBy(ruleNoNode), headObject(part, part+".node-a", "node-a"), false)
		blocks.create(t, "an unbound token creates a claim", refusedBy(ruleNoNode),
			blockObject(part, part+".authz.10-61-0-8-29", "authz", "10.61.0.8/29", "node-a", "", nil), false)
		blocks.edit(t, bBlock, "an unbound token borrows from node-b's block", refusedBy(ruleNoNode), false, func(o *unstructured.Unstructured) {
			setState(t, o, "2-7", append(records(o), "authz.a1.eth0 10.61.0.1@authz node=node-a"))
		})
		blocks.edit(t, bBlock, "an unbound token adds a record naming no node", refusedBy(ruleNoNode), false, func(o *unstructured.Unstructured) {
			setState(t, o, "2-7", append(records(o), "authz.x1.eth0 10.61.0.1@authz node="))
		})
		blocks.remove(t, bBlock, "an unbound token deletes node-b's block", refusedBy(ruleNoNode), false)
		heads.remove(t, bHead, "an unbound token deletes node-b's head", refusedBy(ruleNoNode), false)
		blocks.get(t, bBlock) // reads are RBAC's
		heads.get(t, bHead)
	})

	t.Run("controller", func(t *testing.T) {
		kc := s.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-controller")
		blocks, heads := rawFor(ctx, t, kc, ipamBlocksGVR), rawFor(ctx, t, kc, ipamNodesGVR)
		blocks.edit(t, bBlock, "the controller frees node-b's address", allowed, true, func(o *unstructured.Unstructured) {
			setState(t, o, "1-7,0", nil)
		})
		heads.edit(t, bHead, "the controller writes node-b's head", allowed, true, func(o *unstructured.Unstructured) {
			setSpec(t, o, []any{map[string]any{"handle": "x", "lender": "node-c"}}, "loans")
		})
		blocks.remove(t, bBlock, "the controller deletes node-b's block", allowed, true)
		heads.remove(t, bHead, "the controller deletes node-b's head", allowed, true)
		blocks.create(t, "the controller creates a claim naming node-c", allowed,
			blockObject(part, bBlock, "authz", "10.61.0.0/29", "node-c", "", nil), true)
	})
}

// TestNodeWritesLargeLender: the node-writes policy's rules on a lender's
// IPAMBlock as large as the datastore writes one (kube.MaxObjectBytes of
// spec) stay within the API server's CEL cost limits: a loan (one record
// of the borrower's own added) is admitted, and a change of another
// record is still refused by the rule, not by an evaluation error.
func TestNodeWritesLargeLender(t *testing.T) {
	s := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	part := authzPartition("large")
	var recs []string
	size := 0
	for i := 0; size < kube.MaxObjectBytes-200; i++ {
		r := fmt.Sprintf("net1.%064x.eth0 10.%d.%d.%d@large-pool ns=default pod=web-%06d", i, 64+i>>16, i>>8&255, i&255, i)
		recs = append(recs, r)
		size += len(r) + 3
	}
	name := part + ".large-pool.10-64-0-0-14"
	lender := blockObject(part, name, "large-pool", "10.64.0.0/14", "node-big", "", recs)
	admin := rawFor(ctx, t, s.AdminKubeconfig, ipamBlocksGVR)
	_, err := admin.res.Create(ctx, lender, metav1.CreateOptions{})
	mustAdmin(t, "the large block", err)
	a := rawFor(ctx, t, s.NodeKubeconfig(t, "node-a"), ipamBlocksGVR)
	t.Logf("the large block: %d records, %d bytes", len(recs), size)
	a.edit(t, name, "node-a borrows from the large block", allowed, false, func(o *unstructured.Unstructured) {
		setState(t, o, "", append(slices.Clone(recs), "net1.a1.eth0 10.67.255.255@large-pool node=node-a"))
	})
	a.edit(t, name, "node-a drops the large block's last record", refusedBy(ruleOthersKept), false, func(o *unstructured.Unstructured) {
		setState(t, o, "", recs[:len(recs)-1])
	})
}
