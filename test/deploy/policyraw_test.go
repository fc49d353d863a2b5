package deploy

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/ipkeeper/ipkeeper/internal/store/kube"
)

// The node-writes policy's rules, each with its refusal (the part of the
// policy's message that names it), tried with raw objects of the
// datastore's wire format: a forged write is raw by nature.
const (
	ruleNoNode      = "carry no node"
	ruleBlockOwner  = "may create and delete only the IPAMBlocks whose spec.node is"
	ruleBlockName   = "is not named for its pool and CIDR"
	ruleClaimKept   = "its pool, CIDR and node do not change"
	ruleOthersKept  = "the records of other handles change"
	ruleFreeKept    = "the free queue changes while no record of its own does"
	ruleLabelsKept  = "labels other than " + kube.LendsPrefix
	ruleMetaKept    = "owner references or finalizers change"
	ruleHeadOwner   = "may write only its own IPAMNode"
	ruleHeadName    = "is not named for its node"
	ruleHeadOnly    = "a node writes only its node and loans"
	hashedPool      = "kube-fd70::-120"                  // a pool name that is not a DNS name
	hashedPoolPart  = "kube-fd70--120--zatoab2ltfrumece" // its part of an object name
	hashedPoolBlock = "fd70::/122"
)

// refusedBy returns a check that err is the node-writes policy's refusal
// by the rule whose message holds rule.
func refusedBy(rule string) func(*testing.T, string, error) {
	return func(t *testing.T, what string, err error) {
		t.Helper()
		denied(t, what, err)
		if err != nil && !strings.Contains(err.Error(), rule) {
			t.Errorf("%s: %v, want the refusal %q", what, err, rule)
		}
	}
}

// rawClient writes the objects of one resource with one identity.
type rawClient struct {
	ctx context.Context
	res dynamic.NamespaceableResourceInterface
}

func rawFor(ctx context.Context, t *testing.T, kc string, gvr schema.GroupVersionResource) rawClient {
	return rawClient{ctx: ctx, res: dynamicFor(t, kc).Resource(gvr)}
}

func (c rawClient) get(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	o, err := c.res.Get(c.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// create creates o (dry run unless real) and checks the answer with want.
func (c rawClient) create(t *testing.T, what string, want func(*testing.T, string, error), o *unstructured.Unstructured, real bool) {
	t.Helper()
	opts := metav1.CreateOptions{}
	if !real {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err := c.res.Create(c.ctx, o, opts)
	want(t, what, err)
}

// edit reads the object name, changes it and updates it (dry run unless
// real), checking the answer with want.
func (c rawClient) edit(t *testing.T, name, what string, want func(*testing.T, string, error), real bool, change func(o *unstructured.Unstructured)) {
	t.Helper()
	o := c.get(t, name)
	change(o)
	opts := metav1.UpdateOptions{}
	if !real {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err := c.res.Update(c.ctx, o, opts)
	want(t, what, err)
}

func (c rawClient) remove(t *testing.T, name, what string, want func(*testing.T, string, error), real bool) {
	t.Helper()
	opts := metav1.DeleteOptions{}
	if !real {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	want(t, what, c.res.Delete(c.ctx, name, opts))
}

func mustAdmin(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// blockObject is an IPAMBlock as the datastore writes it in partition
// part: named name, the claim of cidr in pool for node, with state when
// records is not nil (free the free queue), labeled for its node, its pool
// and each borrower in lends.
func blockObject(part, name, pool, cidr, node, free string, records []string, lends ...string) *unstructured.Unstructured {
	labels := map[string]any{kube.LabelPartition: part, kube.LabelNode: node, kube.LabelPool: labelOf(pool)}
	for _, b := range lends {
		labels[kube.LendsPrefix+b] = ""
	}
	spec := map[string]any{"pool": pool, "cidr": cidr, "node": node}
	o := map[string]any{"apiVersion": "ipkeeper.io/v1beta1", "kind": "IPAMBlock",
		"metadata": map[string]any{"name": name, "labels": labels}, "spec": spec}
	if records != nil {
		spec["state"] = map[string]any{"free": free, "records": recordMap(records)}
		o["summary"] = map[string]any{"inUse": int64(len(records)), "handles": int64(len(records))}
	}
	return &unstructured.Unstructured{Object: o}
}

// labelOf is the label value of a pool name: the name, or its hashed
// object-name part when it is not a label value.
func labelOf(pool string) string {
	if pool == hashedPool {
		return hashedPoolPart
	}
	return pool
}

// headObject is an IPAMNode (a node's head) of partition part.
func headObject(part, name, node string, loans ...map[string]any) *unstructured.Unstructured {
	o := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "ipkeeper.io/v1beta1", "kind": "IPAMNode",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"node": node, "loans": toAnyMaps(loans)}}}
	if part != "" {
		o.SetLabels(map[string]string{kube.LabelPartition: part})
	}
	return o
}

func toAnyMaps(s []map[string]any) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// recordMap is records as a block's state keeps them: each by its first
// field (the handle ID), holding the rest; a later record of a key
// replaces an earlier one.
func recordMap(records []string) map[string]any {
	out := make(map[string]any, len(records))
	for _, r := range records {
		k, rest, _ := strings.Cut(r, " ")
		out[k] = rest
	}
	return out
}

// records returns the block's records, whole, in the order of their keys.
func records(o *unstructured.Unstructured) []string {
	m, _, _ := unstructured.NestedStringMap(o.Object, "spec", "state", "records")
	out := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+" "+m[k])
	}
	return out
}

// dropped returns records without the record of handle id.
func dropped(records []string, id string) []string {
	return slices.DeleteFunc(slices.Clone(records), func(r string) bool { return strings.HasPrefix(r, id+" ") })
}

// patch sends a JSON Patch of name (dry run unless real) and checks the
// answer with want: admission sees the object as patched, as an UPDATE.
func (c rawClient) patch(t *testing.T, name, what string, want func(*testing.T, string, error), real bool, ops string) {
	t.Helper()
	opts := metav1.PatchOptions{}
	if !real {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err := c.res.Patch(c.ctx, name, types.JSONPatchType, []byte(ops), opts)
	want(t, what, err)
}

// setState sets the block's records and free queue, and the summary.
func setState(t *testing.T, o *unstructured.Unstructured, free string, recs []string) {
	t.Helper()
	if err := unstructured.SetNestedField(o.Object, map[string]any{"free": free, "records": recordMap(recs)}, "spec", "state"); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(o.Object, map[string]any{"inUse": int64(len(recs)), "handles": int64(len(recs))}, "summary"); err != nil {
		t.Fatal(err)
	}
}

func setFree(t *testing.T, o *unstructured.Unstructured, free string) {
	t.Helper()
	if err := unstructured.SetNestedField(o.Object, free, "spec", "state", "free"); err != nil {
		t.Fatal(err)
	}
}

func setSpec(t *testing.T, o *unstructured.Unstructured, value any, field string) {
	t.Helper()
	if err := unstructured.SetNestedField(o.Object, value, "spec", field); err != nil {
		t.Fatal(err)
	}
}
