package webui

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/testenv"
	"github.com/ipkeeper/ipkeeper/internal/webui"
	"github.com/ipkeeper/ipkeeper/test/webui/webuitest"
)

// kubeToken is the bearer token the map on the Kubernetes datastore asks for.
const kubeToken = "map-s3cret"

// TestAddressMapKubernetesInBrowser loads the map of the Kubernetes
// datastore (a real kube-apiserver with the CRDs and the shipped RBAC) in
// chromium. The map is served as in a cluster: by the controller's
// ServiceAccount, behind a bearer token (given once as ?token=, then kept
// in a cookie for the page's requests and its event stream). The
// allocations of every node are made by one store of the same account (a
// node's own credentials write only its own node's objects): the same
// three pools as on the local store, the drawing, the node table, a
// block's addresses, a search, and an ADD and a DEL showing up live.
func TestAddressMapKubernetesInBrowser(t *testing.T) {
	testenv.NeedCommands(t, "chromium")
	chromium, err := webuitest.Chromium()
	if err != nil {
		t.Fatal(err)
	}
	srv := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ds := config.Datastore{Type: config.DatastoreKubernetes, Prefix: "webui-browser",
		Kubeconfig: srv.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-controller")}
	st, err := datastore.Open(ctx, ds, datastore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a := allocator.New(st, nil)
	for _, p := range []ipam.Pool{
		{Name: "a-v4", CIDR: netip.MustParsePrefix("10.20.0.0/24"), BlockSize: 26, Gateway: netip.MustParseAddr("10.20.0.1"),
			Exclude: []netip.Prefix{netip.MustParsePrefix("10.20.0.200/29")}},
		{Name: "b-tiny", CIDR: netip.MustParsePrefix("10.30.0.0/28"), BlockSize: 28},
		{Name: "c-v6", CIDR: netip.MustParsePrefix("fd00:10::/64"), BlockSize: 122},
	} {
		if err := a.CreatePool(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	alloc := func(node, pod string, pools ...string) []string {
		t.Helper()
		req := allocator.Request{Handle: ipam.Handle{ID: "net.ctr-" + pod + ".eth0", Network: "net", ContainerID: "ctr-" + pod,
			IfName: "eth0", Node: node, Namespace: "default", Pod: pod}}
		for _, p := range pools {
			req.Sets = append(req.Sets, []string{p})
		}
		h, err := a.Allocate(ctx, req)
		if err != nil {
			t.Fatalf("allocate %s on %s: %v", pod, node, err)
		}
		var out []string
		for _, ip := range h.IPs {
			out = append(out, ip.Addr.String())
		}
		return out
	}
	alloc("node-a", "web-1", "a-v4", "c-v6")
	alloc("node-a", "web-2", "a-v4")
	db1 := alloc("node-b", "db-1", "a-v4")
	alloc("node-a", "tiny-1", "b-tiny")
	alloc("node-b", "tiny-2", "b-tiny")

	// The map, as the controller serves it.
	mapDS := ds
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u, err := webui.New(webui.Options{Datastore: mapDS, Listen: l.Addr().String(), Token: kubeToken})
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := u.Serve(sctx, l); err != nil {
			t.Errorf("serving the map: %v", err)
		}
	})
	defer func() { stop(); wg.Wait() }()
	base := "http://" + l.Addr().String() + "/"
	resp, err := http.Get(base + "api/pools")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /api/pools without the token: %d, want 401", resp.StatusCode)
	}

	art, err := webuitest.ArtifactsDir("webui-kubernetes", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	bctx, bcancel := webuitest.Browser(ctx, chromium, t.TempDir())
	defer bcancel()
	p := &page{t: t, ctx: bctx, dir: art}
	if err := chromedp.Do(bctx, chromedp.Navigate(base+"?token="+kubeToken)); err != nil {
		t.Fatalf("loading the map: %v", err)
	}
	p.wait("the first drawing", "window.ipkMap && window.ipkMap.ready === true")
	p.shot("overview")

	var counts map[string]string
	p.eval(`Object.fromEntries([...document.querySelectorAll('article[data-pool]')].map((a) =>
		[a.dataset.pool, [a.dataset.claimed, a.dataset.inUse, a.dataset.borrowed].join(' ')]))`, &counts)
	if want := map[string]string{"a-v4": "2 3 0", "b-tiny": "1 2 1", "c-v6": "1 1 0"}; fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("pools drawn with claimed, in use, borrowed %v, want %v", counts, want)
	}
	pools := p.pools()
	tiny := findBlock(t, pools, "b-tiny", "10.30.0.0/28")
	if tiny.Node != "node-a" || tiny.Borrowed != 1 || !tiny.MarkBorrowed {
		t.Errorf("b-tiny's block drawn for %s with %d borrowed (marker %v), want node-a with 1", tiny.Node, tiny.Borrowed, tiny.MarkBorrowed)
	}
	var table []struct{ Node, Cells string }
	p.eval(`[...document.querySelectorAll('#nodetable tbody tr')].map((tr) => ({Node: tr.dataset.node,
		Cells: [...tr.querySelectorAll('td.num')].map((td) => td.textContent).join(' ')}))`, &table)
	wantTable := map[string]string{"node-a": "3 5 0 1 3", "node-b": "1 1 1 0 2"}
	if len(table) != len(wantTable) {
		t.Errorf("node table has %d rows, want %d: %+v", len(table), len(wantTable), table)
	}
	for _, r := range table {
		if r.Cells != wantTable[r.Node] {
			t.Errorf("node table row %s: %q, want %q (blocks, in use, borrowed, lent, handles)", r.Node, r.Cells, wantTable[r.Node])
		}
	}

	// A block's addresses.
	p.clickBlock("b-tiny", tiny)
	p.wait("the block's addresses", `window.ipkMap.detail && window.ipkMap.detail.cidr === "10.30.0.0/28"`)
	var rows []struct{ Addr, State, Pod, Namespace, Node string }
	p.eval("window.ipkMap.detail.rows", &rows)
	var states []string
	for _, r := range rows {
		states = append(states, r.Addr+" "+r.State+" "+r.Namespace+"/"+r.Pod+" "+r.Node)
	}
	wantStates := []string{"10.30.0.0 reserved / ", "10.30.0.1 used default/tiny-1 node-a",
		"10.30.0.2 borrowed default/tiny-2 node-b", "10.30.0.15 reserved / "}
	if !slices.Equal(states, wantStates) {
		t.Errorf("block rows:\n%s\nwant\n%s", strings.Join(states, "\n"), strings.Join(wantStates, "\n"))
	}

	// Search for a pod.
	if err := chromedp.Do(bctx, chromedp.SendKeys("#q", "db-1"+kb.Enter)); err != nil {
		t.Fatal(err)
	}
	p.wait("the search to select db-1", fmt.Sprintf(`window.ipkMap.selected && window.ipkMap.selected.addr === %q &&
		window.ipkMap.detail && window.ipkMap.detail.highlighted === %q`, db1[0], db1[0]))

	// Live: an ADD on a new node appears, its DEL frees the address.
	var gen int
	p.eval("window.ipkMap.generation", &gen)
	live := alloc("node-c", "live-1", "a-v4")
	took := p.wait("the ADD to show", `(window.ipkMap.pools["a-v4"].blocks.find((b) => b.node === "node-c") || {}).inUse === 1 &&
		!!document.querySelector('#nodetable tr[data-node="node-c"]')`)
	t.Logf("ADD of %v on node-c drawn %v after it was stored", live, took.Round(time.Millisecond))
	p.shot("live-add")
	if _, err := a.Release(ctx, "node-c", "net.ctr-live-1.eth0"); err != nil {
		t.Fatal(err)
	}
	took = p.wait("the DEL to show", `(window.ipkMap.pools["a-v4"].blocks.find((b) => b.node === "node-c") || {}).inUse === 0 &&
		document.querySelector('article[data-pool="a-v4"]').dataset.inUse === "3"`)
	t.Logf("DEL drawn %v after it was stored", took.Round(time.Millisecond))
	var gen2 int
	p.eval("window.ipkMap.generation", &gen2)
	if gen2 <= gen {
		t.Errorf("generation %d after ADD and DEL, was %d", gen2, gen)
	}
	p.shot("live-del")
}
