package agent

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/podinfo"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kube"
	"github.com/ipkeeper/ipkeeper/internal/testenv"
)

// requestCounter counts the API requests of a client, watches aside
// (long-running: one per informer, not per verb).
type requestCounter struct {
	mu   sync.Mutex
	reqs []string
}

func (c *requestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.URL.Query().Get("watch") != "true" {
			c.mu.Lock()
			c.reqs = append(c.reqs, r.Method+" "+r.URL.Path)
			c.mu.Unlock()
		}
		return rt.RoundTrip(r)
	})
}

// take returns the requests counted since the last take.
func (c *requestCounter) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.reqs
	c.reqs = nil
	return out
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// cniAgent is an agent of node A of a fixture run in this process, serving
// CNI verbs with the node's credentials, its API requests counted.
type cniAgent struct {
	t      *testing.T
	a      *Agent
	f      fixed
	prefix string
	count  *requestCounter
	log    *testenv.SyncBuffer
}

func startCNIAgent(t *testing.T, name string) *cniAgent {
	t.Helper()
	f := fixture(t, name)
	rc, err := clientcmd.BuildConfigFromFlags("", srv.NodeKubeconfig(t, f.nodeA))
	if err != nil {
		t.Fatal(err)
	}
	count := &requestCounter{}
	rc.Wrap(count.wrap)
	logBuf := &testenv.SyncBuffer{}
	log := slog.New(slog.NewJSONHandler(logBuf, nil))
	a := New(srv.Client, f.nodeA, log)
	a.EnableCNI(rc)
	ctx := ctxT(t)
	a.Start(ctx)
	t.Cleanup(a.Shutdown)
	return &cniAgent{t: t, a: a, f: f, prefix: f.ns, count: count, log: logBuf}
}

// add runs an ADD of container id through the agent's CNI handler with
// a config naming pools; it returns the address or the CNI error.
func (c *cniAgent) add(id string, pools ...string) (netip.Addr, *podinfo.CNIError) {
	c.t.Helper()
	conf := cniConf(c.t, "1.1.0", c.f.nodeA, c.prefix, "/run/ipkeeper/agent.sock", map[string]any{"ranges": nil, "pools": pools}, nil)
	body, err := json.Marshal(podinfo.CNIRequest{Command: "ADD", ContainerID: id, IfName: "eth0", NetNS: "/var/run/netns/ipk-absent-" + id,
		Path: "/opt/cni/bin", Stdin: conf})
	if err != nil {
		c.t.Fatal(err)
	}
	w := httptest.NewRecorder()
	c.a.serveCNI(w, httptest.NewRequest(http.MethodPost, podinfo.AgentCNIPath, bytes.NewReader(body)).WithContext(ctxT(c.t)))
	var ans podinfo.CNIAnswer
	if err := json.Unmarshal(w.Body.Bytes(), &ans); err != nil {
		c.t.Fatalf("answer %q: %v", w.Body.String(), err)
	}
	if ans.Error != nil {
		return netip.Addr{}, ans.Error
	}
	var res struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal([]byte(ans.Stdout), &res); err != nil || len(res.IPs) != 1 {
		c.t.Fatalf("result %q: %v", ans.Stdout, err)
	}
	p, err := netip.ParsePrefix(res.IPs[0].Address)
	if err != nil {
		c.t.Fatal(err)
	}
	return p.Addr(), nil
}

// mustAdd is add, failing the test on a CNI error.
func (c *cniAgent) mustAdd(id string, pools ...string) netip.Addr {
	c.t.Helper()
	addr, cerr := c.add(id, pools...)
	if cerr != nil {
		c.t.Fatalf("ADD %s: %+v\nagent log:\n%s", id, cerr, c.log.String())
	}
	return addr
}

// view is the agent's view of the partition (after its first verb).
func (c *cniAgent) view() *poolView {
	c.a.kubeAllocs.mu.Lock()
	defer c.a.kubeAllocs.mu.Unlock()
	if len(c.a.kubeAllocs.views) != 1 {
		c.t.Fatalf("%d views of pools, want 1", len(c.a.kubeAllocs.views))
	}
	return c.a.kubeAllocs.views[0]
}

// waitView waits until the agent's view answers for pool and ok says
// its answer is the one wanted.
func (c *cniAgent) waitView(pool string, ok func(store.Pool) bool) {
	c.t.Helper()
	v := c.view()
	deadline := time.Now().Add(time.Minute)
	for {
		if p, err := v.pool(pool); err == nil && ok(p) {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the agent's view never showed the expected pool %q", pool)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// adminStore is the partition's store with the admin's credentials.
func adminStore(t *testing.T, prefix string) *kube.Store {
	t.Helper()
	st, err := kube.NewForConfig(rest.CopyConfig(srv.Config), prefix)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func createPool(t *testing.T, st *kube.Store, name, cidr string) {
	t.Helper()
	p := ipam.Pool{Name: name, CIDR: netip.MustParsePrefix(cidr), BlockSize: 28, Origin: "cli"}
	if _, err := st.CreatePool(ctxT(t), store.Pool{Spec: p}); err != nil {
		t.Fatal(err)
	}
}

// TestAgentReservationAppliesAtOnce: an address reserved while the agent
// allocates from its pool (ADDs a moment before) is skipped by the first
// ADD after the agent's watch delivered the reservation, not after a
// cache of the pool expires.
func TestAgentReservationAppliesAtOnce(t *testing.T) {
	c := startCNIAgent(t, "resv")
	st := adminStore(t, c.prefix)
	createPool(t, st, "resv-v4", "10.81.0.0/24")
	a1 := c.mustAdd("c1", "resv-v4")
	c.waitView("resv-v4", func(store.Pool) bool { return true })
	a2 := c.mustAdd("c2", "resv-v4")
	if a2 != a1.Next() {
		t.Fatalf("ADDs got %v then %v: the test expects consecutive addresses of the block's free queue", a1, a2)
	}
	next := a2.Next()
	if _, err := st.CreateReservation(ctxT(t), store.Reservation{Pool: "resv-v4", CIDR: netip.PrefixFrom(next, 32), Note: "test"}); err != nil {
		t.Fatal(err)
	}
	c.waitView("resv-v4", func(p store.Pool) bool { return len(p.Spec.Reserved) == 1 })
	if a3 := c.mustAdd("c3", "resv-v4"); a3 == next {
		t.Fatalf("the ADD after the reservation of %v reached the agent got that address", next)
	} else if a3 != next.Next() {
		t.Fatalf("ADD got %v, want %v (the address after the reserved one)", a3, next.Next())
	}
}

// TestAgentWarmADDIsOneRequest: an ADD through the agent in a block its
// node holds, with a config naming its pools (one per family read
// nowhere but the agent's view), sends the API server one request: the
// write of the node's block.
func TestAgentWarmADDIsOneRequest(t *testing.T) {
	c := startCNIAgent(t, "onereq")
	st := adminStore(t, c.prefix)
	createPool(t, st, "onereq-v4", "10.82.0.0/24")
	createPool(t, st, "onereq-v4b", "10.82.1.0/24") // two named pools: no list of them either
	c.mustAdd("w1", "onereq-v4", "onereq-v4b")
	c.waitView("onereq-v4", func(store.Pool) bool { return true })
	c.waitView("onereq-v4b", func(store.Pool) bool { return true })
	c.mustAdd("w2", "onereq-v4", "onereq-v4b")
	c.count.take()
	const adds = 5
	for i := range adds {
		c.mustAdd("n"+string(rune('a'+i)), "onereq-v4", "onereq-v4b")
	}
	reqs := c.count.take()
	for _, r := range reqs {
		if strings.HasPrefix(r, "GET ") {
			t.Errorf("a warm ADD read the API: %s", r)
		}
	}
	if len(reqs) != adds {
		t.Fatalf("%d warm ADDs sent %d API requests, want %d (one write each):\n%s", adds, len(reqs), adds, strings.Join(reqs, "\n"))
	}
}

// TestAgentStalePoolViewCannotAllocateInRemovedPool: with the agent's
// view of the pools frozen before a pool's removal (its watch stopped:
// the view still holds the pool), the next ADD fails instead of handing
// out an address of the removed pool: the removal wrote the node's
// object, so the ADD's write conflicts, and the block it then claims is
// checked against the pool read up to date.
func TestAgentStalePoolViewCannotAllocateInRemovedPool(t *testing.T) {
	c := startCNIAgent(t, "stale")
	st := adminStore(t, c.prefix)
	createPool(t, st, "stale-v4", "10.83.0.0/24")
	c.mustAdd("s1", "stale-v4")
	c.waitView("stale-v4", func(store.Pool) bool { return true })
	c.mustAdd("s2", "stale-v4")
	for _, id := range []string{"s1", "s2"} {
		if _, err := allocator.New(st, nil).Release(ctxT(t), c.f.nodeA, ipam.HandleID("net1", id, "eth0")); err != nil {
			t.Fatal(err)
		}
	}
	v := c.view()
	v.shutdown() // frozen: it still answers with the pool
	if err := allocator.New(st, nil).DeletePool(ctxT(t), "stale-v4"); err != nil {
		t.Fatal(err)
	}
	if _, err := v.pool("stale-v4"); err != nil {
		t.Fatalf("the frozen view lost the pool (%v): the test needs it stale", err)
	}
	addr, cerr := c.add("s3", "stale-v4")
	if cerr == nil {
		t.Fatalf("ADD after the pool's removal got %v from the removed pool", addr)
	}
	claims, err := st.ListClaims(ctxT(t), store.ClaimSelector{Pool: "stale-v4"})
	if err != nil || len(claims) != 0 {
		t.Fatalf("claims of the removed pool: %v, %v", claims, err)
	}
}
