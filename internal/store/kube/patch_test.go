package kube

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// TestPatchStaleVersion: a block's patch is a compare-and-swap on the
// real API server. Sent at the version the object holds it applies;
// sent again at that version, now stale, it is 409 Conflict
// (ErrConflict) and the object is exactly as the first patch left it.
func TestPatchStaleVersion(t *testing.T) {
	st := openStore(t)
	ctx := ctxT(t)
	n, err := st.CreateNode(ctx, claimed(t, st, dualStackNode(t, "node-a", "node-b")))
	if err != nil {
		t.Fatal(err)
	}
	name := st.names.claim(n.Blocks[0].Pool, n.Blocks[0].CIDR)
	before, err := st.get(ctx, kindBlock, name)
	if err != nil {
		t.Fatal(err)
	}
	v0 := store.Version(before.Metadata.ResourceVersion)
	set := func(free string) []patchOp {
		return []patchOp{{Op: "add", Path: "/spec/state/free", Value: free}}
	}
	v1, err := st.patch(ctx, kindBlock, name, v0, writeNonce(), set("0-5"))
	if err != nil {
		t.Fatalf("patch at the stored version: %v", err)
	}
	if v1 == v0 || v1 == "" {
		t.Fatalf("patch at the stored version: version %q, want a new one (was %q)", v1, v0)
	}
	after, err := st.get(ctx, kindBlock, name)
	if err != nil {
		t.Fatal(err)
	}
	if store.Version(after.Metadata.ResourceVersion) != v1 {
		t.Fatalf("stored version %q, the patch answered %q", after.Metadata.ResourceVersion, v1)
	}
	var w blockWire
	if err := json.Unmarshal(after.Spec, &w); err != nil || w.State == nil || w.State.Free != "0-5" {
		t.Fatalf("patched state %s (%v), want free 0-5", after.Spec, err)
	}

	_, err = st.patch(ctx, kindBlock, name, v0, writeNonce(), set("0-9"))
	if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "the object has been modified") {
		t.Fatalf("patch at a stale version: %v, want 409 Conflict", err)
	}
	again, err := st.get(ctx, kindBlock, name)
	if err != nil {
		t.Fatal(err)
	}
	if again.Metadata.ResourceVersion != after.Metadata.ResourceVersion || !bytes.Equal(again.Spec, after.Spec) ||
		again.Metadata.Annotations[AnnotationWrite] != after.Metadata.Annotations[AnnotationWrite] {
		t.Fatalf("a patch at a stale version changed the object:\n  %s %v\nwas\n  %s %v",
			again.Spec, again.Metadata, after.Spec, after.Metadata)
	}
}
