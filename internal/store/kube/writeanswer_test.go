package kube

import (
	"bytes"
	"io"
	"net/http"
	"net/netip"
	"sync"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// answerRecorder keeps the answers to the POSTs and PUTs that pass.
type answerRecorder struct {
	next    http.RoundTripper
	mu      sync.Mutex
	answers []string
}

func (r *answerRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := r.next.RoundTrip(req)
	if err != nil || req.Method != http.MethodPost && req.Method != http.MethodPut {
		return res, err
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return nil, err
	}
	res.Body = io.NopCloser(bytes.NewReader(body))
	r.mu.Lock()
	r.answers = append(r.answers, req.Method+" "+req.URL.Path+": "+string(body))
	r.mu.Unlock()
	return res, nil
}

// TestWritesAnswerMetadataOnly: the API server answers the datastore's
// creates and updates with the object's metadata (the new
// resourceVersion), not the whole object it was just sent — a node
// object's answer would otherwise carry all its records back, encoded by
// the server and decoded here on every ADD.
func TestWritesAnswerMetadataOnly(t *testing.T) {
	rec := &answerRecorder{}
	st := openTraced(t, func(rt http.RoundTripper) http.RoundTripper { rec.next = rt; return rec })
	ctx := ctxT(t)
	n, err := st.CreateNode(ctx, dualStackNode(t, "node-a", "node-b"))
	if err != nil {
		t.Fatal(err)
	}
	before := n.Version
	if n, err = st.UpdateNode(ctx, n); err != nil || n.Version == before {
		t.Fatal(err)
	}
	if _, err := st.CreatePool(ctx, store.Pool{Spec: pool4}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateClaim(ctx, store.Claim{BlockRef: store.BlockRef{Pool: pool4.Name, CIDR: netip.MustParsePrefix("10.0.0.64/26")}, Node: "node-a"}); err != nil {
		t.Fatal(err)
	}
	if got, err := st.GetNode(ctx, "node-a"); err != nil || got.Version != n.Version || len(got.Handles) != len(n.Handles) {
		t.Fatalf("node read back: %+v, %v; want version %s and %d handles", got, err, n.Version, len(n.Handles))
	}
	if len(rec.answers) != 4 {
		t.Fatalf("%d write answers recorded, want 4: %q", len(rec.answers), rec.answers)
	}
	for _, a := range rec.answers {
		if !bytes.Contains([]byte(a), []byte(`"kind":"PartialObjectMetadata"`)) || bytes.Contains([]byte(a), []byte(`"spec"`)) {
			t.Errorf("a write was answered with more than the object's metadata: %s", a)
		}
	}
}
