package kube

import (
	"errors"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// Modes of lossyTransport for the next POST, PUT or PATCH.
const (
	pass        = iota
	dropAnswer  // the server stores the write; its answer is lost
	dropRequest // the write never reaches the server
)

// lossyTransport loses the next write's request or answer, as a broken
// connection would.
type lossyTransport struct {
	rt   http.RoundTripper
	mode atomic.Int32
}

var errLost = errors.New("connection reset (test)")

func (l *lossyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPost && req.Method != http.MethodPut && req.Method != http.MethodPatch {
		return l.rt.RoundTrip(req)
	}
	switch l.mode.Swap(pass) {
	case dropRequest:
		return nil, errLost
	case dropAnswer:
		resp, err := l.rt.RoundTrip(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return nil, errLost
	}
	return l.rt.RoundTrip(req)
}

// TestLostAnswer: a write whose answer is lost but which the server
// stored is reported stored, with the version the server gave it (read
// back by the write's AnnotationWrite value); a write that never arrived
// is ErrUnavailable and changed nothing.
func TestLostAnswer(t *testing.T) {
	s := kubetest.Require(t, srv)
	cfg, err := clientcmd.BuildConfigFromFlags("", s.NodeKubeconfig(t, "node-a"))
	if err != nil {
		t.Fatal(err)
	}
	lossy := &lossyTransport{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { lossy.rt = rt; return lossy })
	st, err := NewForConfig(cfg, "lost"+strconv.FormatInt(partitions.Add(1), 10))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := ctxT(t)

	fixture := claimed(t, st, dualStackNode(t, "node-a", "node-b"))
	lossy.mode.Store(dropAnswer)
	n, err := st.CreateNode(ctx, fixture)
	if err != nil {
		t.Fatalf("create whose answer was lost: %v, want it resolved as stored", err)
	}
	got, err := st.GetNode(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	sameNode(t, got, n)

	lossy.mode.Store(dropAnswer)
	if n, err = st.UpdateNode(ctx, n); err != nil {
		t.Fatalf("update whose answer was lost: %v, want it resolved as stored", err)
	}
	if got, err = st.GetNode(ctx, "node-a"); err != nil || got.Version != n.Version {
		t.Fatalf("after the resolved update: version %q, %v; want %q", got.Version, err, n.Version)
	}

	lossy.mode.Store(dropRequest)
	if _, err := st.UpdateNode(ctx, n); !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "outcome unknown") {
		t.Fatalf("update that never arrived: %v, want ErrUnavailable (outcome unknown)", err)
	}
	if got, err = st.GetNode(ctx, "node-a"); err != nil || got.Version != n.Version {
		t.Fatalf("after the lost update: version %q, %v; want %q (unchanged)", got.Version, err, n.Version)
	}

	// A write of what changed (a block's patch: the borrowed record
	// released) whose answer was lost, then one that never arrived.
	released := func(n store.Node) store.Node {
		t.Helper()
		h := n.Handles[2]
		b6, err := n.Blocks[1].Release(h.IPs[0].Addr, h.ID)
		if err != nil {
			t.Fatal(err)
		}
		n.Blocks = []ipam.Block{n.Blocks[0], b6}
		n.Handles = n.Handles[:2]
		return n
	}
	lossy.mode.Store(dropRequest)
	if _, err := st.UpdateNode(ctx, released(n)); !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "outcome unknown") {
		t.Fatalf("patch that never arrived: %v, want ErrUnavailable (outcome unknown)", err)
	}
	if got, err = st.GetNode(ctx, "node-a"); err != nil || got.Version != n.Version || len(got.Handles) != 3 {
		t.Fatalf("after the lost patch: version %q, %d handles, %v; want %q, 3 (unchanged)", got.Version, len(got.Handles), err, n.Version)
	}
	lossy.mode.Store(dropAnswer)
	if n, err = st.UpdateNode(ctx, released(n)); err != nil {
		t.Fatalf("patch whose answer was lost: %v, want it resolved as stored", err)
	}
	if got, err = st.GetNode(ctx, "node-a"); err != nil || got.Version != n.Version || len(got.Handles) != 2 {
		t.Fatalf("after the resolved patch: version %q, %d handles, %v; want %q, 2", got.Version, len(got.Handles), err, n.Version)
	}

	lossy.mode.Store(dropAnswer)
	c, err := st.CreateClaim(ctx, store.Claim{BlockRef: store.BlockRef{Pool: "blue", CIDR: netip.MustParsePrefix("10.0.0.128/26")}, Node: "node-a"})
	if err != nil {
		t.Fatalf("claim whose answer was lost: %v, want it resolved as stored", err)
	}
	if back, err := st.GetClaim(ctx, c.BlockRef); err != nil || back != c {
		t.Fatalf("claim read back %+v, %v; want %+v", back, err, c)
	}
}
