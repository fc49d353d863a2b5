package kube

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
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

// bodyLog keeps the method, path and body of every write request.
type bodyLog struct {
	next http.RoundTripper
	mu   sync.Mutex
	all  []string
}

func (l *bodyLog) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet {
		var body []byte
		if req.GetBody != nil {
			if rc, err := req.GetBody(); err == nil {
				body, _ = io.ReadAll(rc)
				rc.Close()
			}
		}
		l.mu.Lock()
		l.all = append(l.all, req.Method+" "+req.URL.Path+" "+string(body))
		l.mu.Unlock()
	}
	return l.next.RoundTrip(req)
}

func (l *bodyLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	all := l.all
	l.all = nil
	return all
}

// TestUpdatePatchesWhatChanged: a write of a node object read from the
// store sends, per block it changes, a JSON Patch holding the records it
// adds or removes and not the block's other records; in one write a
// dual-stack handle added and another node's borrowed record dropped
// (in the IPv6 block only) read back as written, the object no longer
// lending to that node.
func TestUpdatePatchesWhatChanged(t *testing.T) {
	s := kubetest.Require(t, srv)
	log := &bodyLog{}
	cfg := rest.CopyConfig(s.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { log.next = rt; return log }
	st, err := NewForConfig(cfg, "p"+strconv.FormatInt(partitions.Add(1), 10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := ctxT(t)
	n, err := st.CreateNode(ctx, claimed(t, st, dualStackNode(t, "node-a", "node-b")))
	if err != nil {
		t.Fatal(err)
	}
	log.take()

	next := n
	next.Blocks = slices.Clone(n.Blocks)
	next.Handles = slices.Clone(n.Handles[:2]) // node-b's record dropped
	b6, err := next.Blocks[1].Release(n.Handles[2].IPs[0].Addr, n.Handles[2].ID)
	if err != nil {
		t.Fatal(err)
	}
	next.Blocks[1] = b6
	h := ipam.Handle{ID: ipam.HandleID("kindnet", "added", "eth0"), Network: "kindnet", ContainerID: "added", IfName: "eth0",
		Node: "node-a", Namespace: "default", Pod: "added-0"}
	for i, p := range []ipam.Pool{pool4, pool6} {
		nb, a, err := next.Blocks[i].Assign(p, h.ID)
		if err != nil {
			t.Fatal(err)
		}
		next.Blocks[i] = nb
		h.IPs = append(h.IPs, ipam.HandleIP{Addr: a, Pool: p.Name, Block: nb.CIDR})
	}
	next.Handles = append(next.Handles, h)
	written, err := st.UpdateNode(ctx, next)
	if err != nil {
		t.Fatal(err)
	}
	writes := log.take()
	if len(writes) != 2 {
		t.Fatalf("writes %q, want a patch of each block", writes)
	}
	for _, w := range writes {
		if !strings.HasPrefix(w, http.MethodPatch+" ") || !strings.Contains(w, "kindnet.added.eth0") {
			t.Errorf("write %s: want a PATCH adding the new record", w)
		}
		if strings.Contains(w, "c0ffee") || strings.Contains(w, "legacy") {
			t.Errorf("write %s carries a record it did not change", w)
		}
	}
	got, err := st.GetNode(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	sameNode(t, got, written)
	if ls, err := st.ListNodes(ctx, store.NodeSelector{LendsTo: "node-b"}); err != nil || len(ls) != 0 {
		t.Fatalf("lenders of node-b after its record was dropped: %d, %v; want none", len(ls), err)
	}
	b6name := st.names.claim(next.Blocks[1].Pool, next.Blocks[1].CIDR)
	o, err := st.get(ctx, kindBlock, b6name)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := o.Metadata.Labels[LendsPrefix+"node-b"]; ok {
		t.Fatalf("IPAMBlock %s still labelled as lending to node-b: %v", b6name, o.Metadata.Labels)
	}
}
