package kube

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// TestWritesAnswerMetadataOnly: the API server answers the datastore's
// creates and updates with the object's metadata (the new
// resourceVersion), not the whole object it was just sent — a node
// object's answer would otherwise carry all its records back, encoded by
// the server and decoded here on every ADD.
func TestWritesAnswerMetadataOnly(t *testing.T) {
	st, log := openTraced(t)
	ctx := ctxT(t)
	n, err := st.CreateNode(ctx, claimed(t, st, dualStackNode(t, "node-a", "node-b")))
	if err != nil {
		t.Fatal(err)
	}
	before := n.Version
	if n, err = st.UpdateNode(ctx, n); err != nil || n.Version == before {
		t.Fatalf("update: version %s after %s, %v; want a new version", n.Version, before, err)
	}
	if _, err := st.CreatePool(ctx, store.Pool{Spec: pool4}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateClaim(ctx, store.Claim{BlockRef: store.BlockRef{Pool: pool4.Name, CIDR: netip.MustParsePrefix("10.0.0.128/26")}, Node: "node-a"}); err != nil {
		t.Fatal(err)
	}
	if got, err := st.GetNode(ctx, "node-a"); err != nil || got.Version != n.Version || len(got.Handles) != len(n.Handles) {
		t.Fatalf("node read back: %+v, %v; want version %s and %d handles", got, err, n.Version, len(n.Handles))
	}
	var writes []exchange
	for _, e := range log.take() {
		if e.method == http.MethodPost || e.method == http.MethodPut {
			writes = append(writes, e)
		}
	}
	// Two claims, the node object's create (its IPAMNode, two blocks'
	// states), its unchanged update (the same three), a pool, a claim.
	if len(writes) != 10 {
		t.Fatalf("%d write answers recorded, want 10: %+v", len(writes), writes)
	}
	for _, w := range writes {
		if !strings.Contains(w.answer, `"kind":"PartialObjectMetadata"`) || strings.Contains(w.answer, `"spec"`) {
			t.Errorf("a write was answered with more than the object's metadata: %s %s: %s", w.method, w.path, w.answer)
		}
	}
}
