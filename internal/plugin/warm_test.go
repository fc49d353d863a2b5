package plugin

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
)

// etcdSentBytes is what an etcd server has sent its clients in all, from
// its /metrics.
func etcdSentBytes(t *testing.T, endpoint string) int {
	t.Helper()
	return int(etcdMetric(t, endpoint, func(l string) bool {
		return strings.HasPrefix(l, "etcd_network_client_grpc_sent_bytes_total")
	}))
}

// etcdMetric sums the /metrics samples whose lines match.
func etcdMetric(t *testing.T, endpoint string, match func(line string) bool) float64 {
	t.Helper()
	resp, err := http.Get(endpoint + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var n float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "#") || !match(l) {
			continue
		}
		v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", l, err)
		}
		n += v
	}
	return n
}

// etcdRPCs sums the KV RPCs (Range and Txn, any outcome) an etcd server
// has handled, from its /metrics.
func etcdRPCs(t *testing.T, endpoint string) int {
	t.Helper()
	return int(etcdMetric(t, endpoint, func(l string) bool {
		return strings.HasPrefix(l, "grpc_server_handled_total{") && strings.Contains(l, `grpc_service="etcdserverpb.KV"`) &&
			(strings.Contains(l, `grpc_method="Range"`) || strings.Contains(l, `grpc_method="Txn"`))
	}))
}

// TestADDRoundTripsOnEtcd: a dual-stack ADD on etcd whose node already
// holds blocks with room costs one request, the write, when the node's
// hint file holds what the previous process read and wrote (layout
// marker, identity, pools, node object, the node's claims); without the
// file it costs three: the open's read of all but the claims together,
// the list of the node's claims (the claim guard's), and the write. Its
// DEL costs one and two (a release checks no claim).
func TestADDRoundTripsOnEtcd(t *testing.T) {
	srv := etcdtest.ForTest(t, nil)
	locks := t.TempDir()
	t.Setenv("IPKEEPER_LOCK_DIR", locks)
	h := newHarness(t)
	conf := fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":"net1","type":"bridge",
		"ipam":{"type":"ipkeeper","nodeName":"node-a","datastore":{"type":"etcd","endpoints":[%q],"prefix":"/warm"},%s}}`,
		srv.Endpoint, dualRanges)
	if _, err := h.add("c0", conf); err != nil { // pools, claims, blocks
		t.Fatal(err)
	}
	dropHints := func() {
		hints, _ := filepath.Glob(filepath.Join(locks, "*.hint"))
		if len(hints) != 1 {
			t.Fatalf("hint files %v; want one", hints)
		}
		_ = os.Remove(hints[0])
	}
	for _, hinted := range []bool{true, false} {
		want, wantDel := 3, 2
		if hinted {
			want, wantDel = 1, 1
		} else {
			dropHints()
		}
		before := etcdRPCs(t, srv.Endpoint)
		res, err := h.add("c1", conf)
		if err != nil {
			t.Fatal(err)
		}
		if n := etcdRPCs(t, srv.Endpoint) - before; n != want {
			t.Errorf("hint file %v: a dual-stack ADD took %d etcd requests, want %d", hinted, n, want)
		}
		if len(res.IPs) != 2 {
			t.Fatalf("ADD = %v, want two addresses", addrs(res))
		}
		if !hinted {
			dropHints()
		}
		before = etcdRPCs(t, srv.Endpoint)
		if err := h.p.Del(h.args("c1", conf)); err != nil {
			t.Fatal(err)
		}
		if n := etcdRPCs(t, srv.Endpoint) - before; n != wantDel {
			t.Errorf("hint file %v: a DEL took %d etcd requests, want %d", hinted, n, wantDel)
		}
	}
	st, err := datastore.Open(t.Context(), config.Datastore{Type: config.DatastoreEtcd, Endpoints: []string{srv.Endpoint}, Prefix: "/warm"}, datastore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	hs, err := allocator.New(st, nil).Handles(t.Context())
	if err != nil || len(hs) != 1 || hs[0].ContainerID != "c0" {
		t.Fatalf("handles after the DEL of c1: %+v, %v; want c0's alone", hs, err)
	}
}

// TestHintedADDDoesNotReadTheNode: on etcd a plugin ADD leaves the node's
// object in a hint file beside the node lock, so the next ADD on the node
// reads the layout marker and the pools but not the object (the largest
// thing an ADD would read): what etcd sends the second process is less
// than the object itself.
func TestHintedADDDoesNotReadTheNode(t *testing.T) {
	srv := etcdtest.ForTest(t, nil)
	t.Setenv("IPKEEPER_LOCK_DIR", t.TempDir())
	h := newHarness(t)
	conf := fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":"net1","type":"bridge",
		"ipam":{"type":"ipkeeper","nodeName":"node-a","datastore":{"type":"etcd","endpoints":[%q],"prefix":"/hinted"},%s}}`,
		srv.Endpoint, dualRanges)
	for i := range 40 {
		if _, err := h.add(fmt.Sprint("c", i), conf); err != nil {
			t.Fatal(err)
		}
	}
	st, err := datastore.Open(t.Context(), config.Datastore{Type: config.DatastoreEtcd, Endpoints: []string{srv.Endpoint}, Prefix: "/hinted"}, datastore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	n, err := st.GetNode(t.Context(), "node-a")
	if err != nil {
		t.Fatal(err)
	}
	obj, err := store.MarshalNode(n)
	if err != nil {
		t.Fatal(err)
	}
	before := etcdSentBytes(t, srv.Endpoint)
	if _, err := h.add("last", conf); err != nil {
		t.Fatal(err)
	}
	if sent := etcdSentBytes(t, srv.Endpoint) - before; sent >= len(obj) {
		t.Errorf("etcd sent %d bytes to an ADD on a node whose object is %d bytes: the object was read", sent, len(obj))
	}
	hs, err := allocator.New(st, nil).Handles(t.Context())
	if err != nil || len(hs) != 41 {
		t.Fatalf("%d handles, %v; want 41", len(hs), err)
	}
}
