package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/testenv"
	"github.com/ipkeeper/ipkeeper/test/webui/webuitest"
)

// leakYellow is the leak candidate marker's colour (app.js C.leak).
const leakYellow = "#ffd400"

// checkLeakInBrowser opens the controller's map at url in headless
// chromium: pool's block holding gone's address carries the leak marker
// (its top left pixel), and searching for gone's address lists it as a
// leak candidate in the block's rows. Screenshots go to the artefacts.
func checkLeakInBrowser(t *testing.T, url string, pool ipam.Pool, gone ipam.Handle) {
	t.Helper()
	testenv.NeedCommands(t, "chromium")
	chromium, err := webuitest.Chromium()
	if err != nil {
		t.Fatal(err)
	}
	art, err := webuitest.ArtifactsDir("controller-map", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bctx, bcancel := webuitest.Browser(ctx, chromium, t.TempDir())
	defer bcancel()
	shot := func(name string) {
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err == nil {
			err = os.WriteFile(filepath.Join(art, pool.Name+"-"+name+".png"), png, 0o644)
		}
		if err != nil {
			t.Errorf("screenshot %s: %v", name, err)
		}
	}
	wait := func(what, expr string) {
		t.Helper()
		if _, err := chromedp.Run(bctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(30*time.Second),
			chromedp.WithPollingInterval(20*time.Millisecond))); err != nil {
			shot("failed")
			t.Fatalf("waiting for %s (%s): %v", what, expr, err)
		}
	}
	if err := chromedp.Do(bctx, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	blk := gone.IPs[0].Block.String()
	wait("the leak marker", fmt.Sprintf(`window.ipkMap && window.ipkMap.ready &&
		!!(window.ipkMap.pools[%q].blocks.find((b) => b.cidr === %q) || {}).markLeak`, pool.Name, blk))
	var corner string
	s, err := chromedp.Run(bctx, chromedp.Evaluate[string](fmt.Sprintf(`(() => {
		const b = window.ipkMap.pools[%q].blocks.find((b) => b.cidr === %q);
		const c = document.querySelector('article[data-pool=%q] canvas.grid'); const r = window.devicePixelRatio || 1;
		const d = c.getContext('2d').getImageData(Math.floor((b.x + 1) * r), Math.floor((b.y + 1) * r), 1, 1).data;
		return JSON.stringify('#' + [d[0], d[1], d[2]].map((v) => v.toString(16).padStart(2, '0')).join('')); })()`, pool.Name, blk, pool.Name)))
	if err == nil {
		err = json.Unmarshal([]byte(s), &corner)
	}
	if err != nil || corner != leakYellow {
		t.Errorf("block %s: top left pixel %q (%v), want the leak marker %s", blk, corner, err, leakYellow)
	}
	shot("overview")
	addr := gone.IPs[0].Addr.String()
	if err := chromedp.Do(bctx, chromedp.SendKeys("#q", addr+kb.Enter)); err != nil {
		t.Fatal(err)
	}
	wait("the leak candidate's row", fmt.Sprintf(`!!window.ipkMap.detail && window.ipkMap.detail.cidr === %q &&
		window.ipkMap.detail.rows.some((r) => r.addr === %q && r.state === 'leak')`, blk, addr))
	row, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('#detail tr[data-state="leak"]').textContent`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(row, addr) || !strings.Contains(row, "pod-gone") {
		t.Errorf("the leak candidate's row reads %q, want %s and its reason", row, addr)
	}
	shot("leak")
}
