package kube

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// TestNodeOldFormRead: an IPAMNode written before records were strings
// (its records JSON objects under "handles") is read as the same node
// object, and the next update writes it as strings.
func TestNodeOldFormRead(t *testing.T) {
	st := openStore(t)
	admin := openAdmin(t, st.Prefix())
	ctx := ctxT(t)
	n := dualStackNode(t, "node-a", "node-b")
	spec, err := store.EncodeNode(n)
	if err != nil {
		t.Fatal(err)
	}
	// As the previous version sent it: NodeSpec with the node's name.
	old, _ := json.Marshal(struct {
		Node string `json:"node"`
		store.NodeSpec
	}{n.Name, spec})
	old = []byte(strings.Replace(string(old), `"handles":`, `"records":[],"handles":`, 1))
	name := st.names.object(n.Name)
	body, _ := admin.newObject(kindNode, name, map[string]string{LendsPrefix + "node-b": ""}, old, "")
	if _, err := admin.create(ctx, kindNode, name, body); err != nil {
		t.Fatal(err)
	}
	got, err := st.GetNode(ctx, n.Name)
	if err != nil {
		t.Fatal(err)
	}
	sameNode(t, got, n)
	if _, err := st.UpdateNode(ctx, got); err != nil {
		t.Fatal(err)
	}
	o, err := admin.get(ctx, kindNode, name)
	if err != nil {
		t.Fatal(err)
	}
	var w headWire
	if err := json.Unmarshal(o.Spec, &w); err != nil {
		t.Fatal(err)
	}
	if w.whole() {
		t.Fatalf("after a read: %s; want the head only", o.Spec)
	}
	again, err := st.GetNode(ctx, n.Name)
	if err != nil {
		t.Fatal(err)
	}
	sameNode(t, again, n)
}
