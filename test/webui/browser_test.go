package webui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/ipkeeper/ipkeeper/internal/testenv"
	"github.com/ipkeeper/ipkeeper/test/e2e/cnirun"
	"github.com/ipkeeper/ipkeeper/test/webui/webuitest"
)

// anyNetNS is CNI_NETNS for direct IPAM calls: the IPAM plugin never
// enters it, and a path that is no namespace passes skel's check.
const anyNetNS = "/run/netns/ipk-webui-never-entered"

// store is a local datastore the real binaries work on.
type store struct {
	dir string
}

func (s store) ctl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(ctlBin, append([]string{"--local-path", s.dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ipkeeperctl %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func (s store) conf(node string, pools ...string) []byte {
	b, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "net", "type": "bridge",
		"ipam": map[string]any{"type": "ipkeeper", "pools": pools, "nodeName": node,
			"datastore": map[string]any{"type": "local", "path": s.dir}}})
	return b
}

// cni runs the plugin binary for pod on node and returns the addresses
// an ADD got.
func (s store) cni(t *testing.T, command, node, pod string, pools ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := cnirun.Run(ctx, ipkeeperBin, cnirun.Call{Command: command, ContainerID: "ctr-" + pod, NetNS: anyNetNS,
		IfName: "eth0", Args: "K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + pod, Path: "/nonexistent", Stdin: s.conf(node, pools...)})
	if err != nil || out.ExitCode != 0 {
		t.Fatalf("%s %s on %s: %v\n%v", command, pod, node, err, out)
	}
	if command != "ADD" {
		return nil
	}
	var res struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal(out.Stdout, &res); err != nil {
		t.Fatalf("ADD %s: result %s: %v", pod, out.Stdout, err)
	}
	var ips []string
	for _, ip := range res.IPs {
		ips = append(ips, strings.Split(ip.Address, "/")[0])
	}
	return ips
}

// drawnBlock is a block cell as the page drew it (window.ipkMap).
type drawnBlock struct {
	CIDR         string  `json:"cidr"`
	Node         string  `json:"node"`
	X            float64 `json:"x"`
	Y            float64 `json:"y"`
	W            float64 `json:"w"`
	H            float64 `json:"h"`
	InUse        int     `json:"inUse"`
	Borrowed     int     `json:"borrowed"`
	Color        string  `json:"color"`
	Tint         string  `json:"tint"`
	Fill         int     `json:"fill"`
	MarkBorrowed bool    `json:"markBorrowed"`
}

type drawnPool struct {
	Layout string       `json:"layout"`
	Blocks []drawnBlock `json:"blocks"`
	Gaps   int          `json:"gaps"`
}

// page drives one browser tab.
type page struct {
	t   *testing.T
	ctx context.Context
	dir string // screenshots
}

// eval evaluates expr in the page and decodes its JSON into v.
func (p *page) eval(expr string, v any) {
	p.t.Helper()
	s, err := chromedp.Run(p.ctx, chromedp.Evaluate[string]("JSON.stringify("+expr+")"))
	if err != nil {
		p.t.Fatalf("evaluating %s: %v", expr, err)
	}
	if err := json.Unmarshal([]byte(s), v); err != nil {
		p.t.Fatalf("evaluating %s: %v: %s", expr, err, s)
	}
}

// wait waits (at most 20 s) until expr is true in the page and returns
// how long that took.
func (p *page) wait(what, expr string) time.Duration {
	p.t.Helper()
	start := time.Now()
	if _, err := chromedp.Run(p.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(20*time.Second),
		chromedp.WithPollingInterval(20*time.Millisecond))); err != nil {
		p.shot("failed-" + strings.ReplaceAll(what, " ", "-"))
		p.t.Fatalf("waiting for %s (%s): %v", what, expr, err)
	}
	return time.Since(start)
}

func (p *page) shot(name string) {
	p.t.Helper()
	png, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(p.dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	p.t.Logf("screenshot: %s", path)
}

func (p *page) pools() map[string]drawnPool {
	p.t.Helper()
	var m map[string]drawnPool
	p.eval("window.ipkMap.pools", &m)
	return m
}

// pixel returns the colour drawn at CSS pixel (x, y) of canvas sel.
func (p *page) pixel(sel string, x, y float64) string {
	p.t.Helper()
	var hex string
	p.eval(fmt.Sprintf(`(() => { const c = document.querySelector(%q); const r = window.devicePixelRatio || 1;
		const d = c.getContext('2d').getImageData(Math.floor(%f * r), Math.floor(%f * r), 1, 1).data;
		return '#' + [d[0], d[1], d[2]].map((v) => v.toString(16).padStart(2, '0')).join(''); })()`, sel, x, y), &hex)
	return hex
}

// clickBlock clicks the middle of a drawn block of pool.
func (p *page) clickBlock(pool string, b drawnBlock) {
	p.t.Helper()
	var at struct{ X, Y float64 }
	p.eval(fmt.Sprintf(`(() => { const c = document.querySelector('article[data-pool=%q] canvas.grid');
		c.scrollIntoView({block: 'center'}); const r = c.getBoundingClientRect();
		return {X: r.left + %f, Y: r.top + %f}; })()`, pool, b.X+b.W/2, b.Y+b.H/2), &at)
	if err := chromedp.Do(p.ctx, chromedp.MouseClickXY(at.X, at.Y)); err != nil {
		p.t.Fatal(err)
	}
}

func findBlock(t *testing.T, pools map[string]drawnPool, pool, cidr string) drawnBlock {
	t.Helper()
	for _, b := range pools[pool].Blocks {
		if b.CIDR == cidr {
			return b
		}
	}
	t.Fatalf("pool %s: block %s not drawn (drawn: %+v)", pool, cidr, pools[pool].Blocks)
	return drawnBlock{}
}

// apiPools is what the test reads from /api/pools to compare with the
// drawing.
type apiPools struct {
	Colors map[string]string `json:"colors"`
}

// TestAddressMapInBrowser loads the map of a local store with three pools
// (IPv4, a one-block IPv4 pool where node-b borrows, IPv6) in chromium and
// checks what is drawn, clicking a block, searching for a pod, and that a
// real plugin ADD and DEL show up live.
func TestAddressMapInBrowser(t *testing.T) {
	testenv.NeedCommands(t, "chromium")
	needBinaries(t)
	chromium, err := webuitest.Chromium()
	if err != nil {
		t.Fatal(err)
	}
	s := store{dir: t.TempDir()}
	s.ctl(t, "pool", "add", "a-v4", "--cidr", "10.20.0.0/24", "--gateway", "10.20.0.1", "--exclude", "10.20.0.200/29")
	s.ctl(t, "pool", "add", "b-tiny", "--cidr", "10.30.0.0/28", "--block-size", "28")
	s.ctl(t, "pool", "add", "c-v6", "--cidr", "fd00:10::/64")
	web1 := s.cni(t, "ADD", "node-a", "web-1", "a-v4", "c-v6")
	s.cni(t, "ADD", "node-a", "web-2", "a-v4")
	db1 := s.cni(t, "ADD", "node-b", "db-1", "a-v4")
	s.cni(t, "ADD", "node-a", "tiny-1", "b-tiny")
	tiny2 := s.cni(t, "ADD", "node-b", "tiny-2", "b-tiny")
	t.Logf("web-1 %v, db-1 %v, tiny-2 %v (borrowed from node-a's block)", web1, db1, tiny2)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ui, err := webuitest.StartUI(ctx, ctlBin, []string{"--local-path", s.dir})
	if err != nil {
		t.Fatal(err)
	}
	defer ui.Stop()
	art, err := webuitest.ArtifactsDir("webui", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", art)
	bctx, bcancel := webuitest.Browser(ctx, chromium, t.TempDir())
	defer bcancel()
	p := &page{t: t, ctx: bctx, dir: art}
	if err := chromedp.Do(bctx, chromedp.Navigate(ui.URL)); err != nil {
		t.Fatalf("loading %s: %v (ipkeeperctl ui stderr: %s)", ui.URL, err, ui.Stderr)
	}
	p.wait("the first drawing", "window.ipkMap && window.ipkMap.ready === true")
	p.shot("overview")
	// The colours the API gives the nodes (now that the page has read the
	// store, so has the server).
	var api apiPools
	resp, err := http.Get(ui.URL + "api/pools")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&api)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}

	// What is drawn: every claimed block once, in its node's colour.
	pools := p.pools()
	for _, c := range []struct {
		pool, layout string
		blocks       int
	}{{"a-v4", "linear", 2}, {"b-tiny", "linear", 1}, {"c-v6", "compressed", 1}} {
		if got := pools[c.pool]; got.Layout != c.layout || len(got.Blocks) != c.blocks {
			t.Errorf("pool %s drawn %s with %d blocks, want %s with %d", c.pool, got.Layout, len(got.Blocks), c.layout, c.blocks)
		}
	}
	if pools["c-v6"].Gaps < 1 {
		t.Errorf("IPv6 pool drawn without a compressed gap: %+v", pools["c-v6"])
	}
	if api.Colors["node-a"] == api.Colors["node-b"] || api.Colors["node-a"] == "" {
		t.Fatalf("node colours %v: want two different ones", api.Colors)
	}
	inUse := map[string]int{}
	for name, dp := range pools {
		for _, b := range dp.Blocks {
			inUse[name] += b.InUse
			if b.Color != api.Colors[b.Node] {
				t.Errorf("%s drawn in %s, but %s's colour is %s", b.CIDR, b.Color, b.Node, api.Colors[b.Node])
			}
			grid := fmt.Sprintf("article[data-pool=%q] canvas.grid", name)
			// The bottom row is filled with the node's colour (in use), the
			// top middle keeps the light tint (mostly free).
			if got := p.pixel(grid, b.X+b.W/2, b.Y+b.H-1); got != b.Color {
				t.Errorf("%s: bottom pixel %s, want the node colour %s", b.CIDR, got, b.Color)
			}
			if got := p.pixel(grid, b.X+b.W/2, b.Y+1); got != b.Tint {
				t.Errorf("%s: top pixel %s, want the tint %s", b.CIDR, got, b.Tint)
			}
			// The top right corner carries the borrowed marker (black)
			// exactly when an address is borrowed.
			want := b.Tint
			if b.Borrowed > 0 {
				want = "#000000"
			}
			if got := p.pixel(grid, b.X+b.W-1, b.Y); got != want || b.MarkBorrowed != (b.Borrowed > 0) {
				t.Errorf("%s (%d borrowed): corner pixel %s, want %s", b.CIDR, b.Borrowed, got, want)
			}
		}
	}
	if want := map[string]int{"a-v4": 3, "b-tiny": 2, "c-v6": 1}; !equalMaps(inUse, want) {
		t.Errorf("addresses in use as drawn: %v, want %v", inUse, want)
	}
	tiny := findBlock(t, pools, "b-tiny", "10.30.0.0/28")
	if tiny.Node != "node-a" || tiny.Borrowed != 1 {
		t.Errorf("b-tiny's block drawn for %s with %d borrowed, want node-a with 1", tiny.Node, tiny.Borrowed)
	}
	var legend int
	p.eval(`document.querySelectorAll('#legend li').length`, &legend)
	if legend != 7 {
		t.Errorf("legend has %d entries, want 7", legend)
	}
	// The pools' counts as the page states them.
	var counts map[string]string
	p.eval(`Object.fromEntries([...document.querySelectorAll('article[data-pool]')].map((a) =>
		[a.dataset.pool, [a.dataset.claimed, a.dataset.inUse, a.dataset.borrowed].join(' ')]))`, &counts)
	if want := map[string]string{"a-v4": "2 3 0", "b-tiny": "1 2 1", "c-v6": "1 1 0"}; fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("pools drawn with claimed, in use, borrowed %v, want %v", counts, want)
	}
	// The node table: blocks, in use, borrowed, lent, handles, and the
	// swatch in the node's colour. node-a's b-tiny block lends one address
	// to node-b.
	var table []struct{ Node, Swatch, Cells string }
	p.eval(`[...document.querySelectorAll('#nodetable tbody tr')].map((tr) => ({Node: tr.dataset.node,
		Swatch: getComputedStyle(tr.querySelector('.swatch')).backgroundColor,
		Cells: [...tr.querySelectorAll('td.num')].map((td) => td.textContent).join(' ')}))`, &table)
	wantTable := map[string]string{"node-a": "3 5 0 1 3", "node-b": "1 1 1 0 2"}
	if len(table) != len(wantTable) {
		t.Errorf("node table has %d rows, want %d: %+v", len(table), len(wantTable), table)
	}
	for _, r := range table {
		if r.Cells != wantTable[r.Node] {
			t.Errorf("node table row %s: %q, want %q (blocks, in use, borrowed, lent, handles)", r.Node, r.Cells, wantTable[r.Node])
		}
		if got := rgbHex(r.Swatch); got != api.Colors[r.Node] {
			t.Errorf("node table row %s: swatch %s, want %s", r.Node, got, api.Colors[r.Node])
		}
	}

	// Click the block: its addresses with pod, node and handle.
	p.clickBlock("b-tiny", tiny)
	p.wait("the block's addresses", `window.ipkMap.detail && window.ipkMap.detail.cidr === "10.30.0.0/28"`)
	var rows []struct{ Addr, State, Pod, Namespace, Node, Handle, Since string }
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
	for _, r := range rows {
		if r.State == "used" || r.State == "borrowed" {
			if r.Handle != "net.ctr-"+r.Pod+".eth0" || r.Since == "" {
				t.Errorf("%s: handle %q since %q", r.Addr, r.Handle, r.Since)
			}
		}
	}
	var borrowedRow string
	p.eval(`document.querySelector('#detail tr[data-state="borrowed"]').textContent`, &borrowedRow)
	if !strings.Contains(borrowedRow, "10.30.0.2") || !strings.Contains(borrowedRow, "default/tiny-2") || !strings.Contains(borrowedRow, "node-b") {
		t.Errorf("borrowed row reads %q", borrowedRow)
	}
	var cell struct{ X, Y, W float64 }
	p.eval(`window.ipkMap.detail.cells["10.30.0.2"]`, &cell)
	if got := p.pixel("#detail canvas.addrgrid", cell.X+cell.W-1, cell.Y); got != "#000000" {
		t.Errorf("the borrowed address's cell has no borrowed marker: corner %s", got)
	}
	if got := p.pixel("#detail canvas.addrgrid", cell.X+1, cell.Y+cell.W-1); got != api.Colors["node-b"] {
		t.Errorf("the borrowed address is drawn %s, want its holder node-b's colour %s", got, api.Colors["node-b"])
	}
	p.shot("block")

	// Search for a pod: the page jumps to its block and address.
	if err := chromedp.Do(bctx, chromedp.SendKeys("#q", "db-1"+kb.Enter)); err != nil {
		t.Fatal(err)
	}
	p.wait("the search to select db-1", fmt.Sprintf(`window.ipkMap.selected && window.ipkMap.selected.addr === %q &&
		window.ipkMap.detail && window.ipkMap.detail.highlighted === %q`, db1[0], db1[0]))
	var hl struct{ Addr, Text string }
	p.eval(`(() => { const tr = document.querySelector('#detail tr.hl'); return {Addr: tr.dataset.addr, Text: tr.textContent}; })()`, &hl)
	if hl.Addr != db1[0] || !strings.Contains(hl.Text, "default/db-1") {
		t.Errorf("after searching db-1 the highlighted row is %+v, want %s of default/db-1", hl, db1[0])
	}
	var sel struct{ Pool, CIDR string }
	p.eval(`{Pool: window.ipkMap.selected.pool, CIDR: window.ipkMap.selected.cidr}`, &sel)
	if drawnSel := p.pools()[sel.Pool]; sel.Pool != "a-v4" || !hasBlock(drawnSel, sel.CIDR, "node-b") {
		t.Errorf("search selected %+v, want node-b's block of a-v4", sel)
	}
	p.shot("search")

	// Live: a real ADD on a new node appears, its DEL frees the address.
	var gen int
	p.eval("window.ipkMap.generation", &gen)
	live := s.cni(t, "ADD", "node-c", "live-1", "a-v4")
	took := p.wait("the ADD to show", `(window.ipkMap.pools["a-v4"].blocks.find((b) => b.node === "node-c") || {}).inUse === 1 &&
		!!document.querySelector('#nodetable tr[data-node="node-c"]')`)
	t.Logf("ADD of %v on node-c drawn %v after the plugin returned", live, took.Round(time.Millisecond))
	p.shot("live-add")
	s.cni(t, "DEL", "node-c", "live-1", "a-v4")
	took = p.wait("the DEL to show", `(window.ipkMap.pools["a-v4"].blocks.find((b) => b.node === "node-c") || {}).inUse === 0 &&
		document.querySelector('article[data-pool="a-v4"]').dataset.inUse === "3"`)
	t.Logf("DEL drawn %v after the plugin returned", took.Round(time.Millisecond))
	var gen2 int
	p.eval("window.ipkMap.generation", &gen2)
	if gen2 <= gen {
		t.Errorf("generation %d after ADD and DEL, was %d", gen2, gen)
	}
	p.shot("live-del")

	// The tiny pool fills while the map watches: it is forecast to run out
	// and marked.
	s.cni(t, "ADD", "node-a", "tiny-3", "b-tiny")
	p.wait("the tiny pool marked as running out", `document.querySelector('article[data-pool="b-tiny"]').dataset.runsOut === "true" &&
		[...document.querySelectorAll('article[data-pool="b-tiny"] .tag.warn')].some((e) => e.textContent.startsWith("runs out in "))`)
	var marked map[string]string
	p.eval(`Object.fromEntries([...document.querySelectorAll('article[data-pool]')].map((a) => [a.dataset.pool, a.dataset.runsOut]))`, &marked)
	if marked["a-v4"] != "false" || marked["c-v6"] != "false" {
		t.Errorf("pools marked as running out: %v, want only b-tiny", marked)
	}
	p.shot("forecast")
}

func hasBlock(p drawnPool, cidr, node string) bool {
	for _, b := range p.Blocks {
		if b.CIDR == cidr && b.Node == node {
			return true
		}
	}
	return false
}

func equalMaps(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// rgbHex turns a computed "rgb(r, g, b)" into "#rrggbb".
func rgbHex(css string) string {
	var r, g, b int
	if _, err := fmt.Sscanf(css, "rgb(%d, %d, %d)", &r, &g, &b); err != nil {
		return css
	}
	return fmt.Sprintf("#%02x%02x%02x", r, g, b)
}
