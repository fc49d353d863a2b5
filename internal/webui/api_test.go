package webui

import (
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

// getAny fetches path and decodes the JSON answer generically, so that
// field names are checked too, failing unless the status is want.
func (s *started) getAny(t *testing.T, path string, want int) any {
	t.Helper()
	resp, err := s.srv.Client().Get(s.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("GET %s: %d %s, want %d", path, resp.StatusCode, body, want)
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, body)
	}
	return v
}

// checkJSON compares got with the JSON document want, after dropping the
// named top-level fields from got (times, generations).
func checkJSON(t *testing.T, what string, got any, want string, drop ...string) {
	t.Helper()
	if m, ok := got.(map[string]any); ok {
		for _, k := range drop {
			if _, ok := m[k]; !ok {
				t.Errorf("%s: no field %q", what, k)
			}
			delete(m, k)
		}
	}
	var w any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: the expected JSON is malformed: %v", what, err)
	}
	if !reflect.DeepEqual(got, w) {
		g, _ := json.MarshalIndent(got, "", "  ")
		t.Errorf("%s:\ngot  %s\nwant %s", what, g, want)
	}
}

// The fixture's node colours: stable across runs and servers.
const colorA, colorB = "#d04d43", "#b1672b"

func TestAPIPoolsNodesBlocksSearch(t *testing.T) {
	dir := t.TempDir()
	hs := writeFixture(t, dir)
	if got := hs["web-2"].IPs[0].Addr.String(); got != "10.20.0.2" {
		t.Fatalf("fixture: web-2 got %s, want 10.20.0.2 (the first free address of node-a's block)", got)
	}
	leaks := &staticLeaks{}
	leaks.set(LeakCandidate{Addr: netip.MustParseAddr("10.20.0.2"), Handle: "net.ctr-web-2.eth0", Pod: "default/web-2",
		Reason: "pod default/web-2 is gone", Since: fixtureTime.Add(time.Hour)})
	opts := localOpts(dir)
	opts.Leaks = leaks
	s := startUI(t, opts)
	waitFor(t, s.u, "the leak candidate", func() bool { return len(s.u.m.leaks) == 1 })
	// The map shows the revision of the local file it read.
	rev := `"revision": ` + itoa(int(localRevision(t, dir)))

	checkJSON(t, "/api/pools", s.getAny(t, "/api/pools", 200), `{
	  `+rev+`, "loaded": true,
	  "colors": {"node-a": "`+colorA+`", "node-b": "`+colorB+`"},
	  "pools": [
	    {"name": "a-v4", "cidr": "10.20.0.0/24", "family": 4, "blockSize": 26, "blockAddrs": 64, "blockBits": 2,
	     "numBlocks": 4, "layout": "linear", "usable": 245, "claimed": 2, "inUse": 3, "borrowed": 0, "leaks": 1,
	     "orphans": 0, "gateway": "10.20.0.1", "exclude": ["10.20.0.200/29"], "origin": "cli",
	     "reserved": [
	       {"from": "10.20.0.0", "to": "10.20.0.0", "reason": "network", "pos": 0, "end": 0.00390625},
	       {"from": "10.20.0.1", "to": "10.20.0.1", "reason": "gateway", "pos": 0.00390625, "end": 0.0078125},
	       {"from": "10.20.0.200", "to": "10.20.0.207", "reason": "excluded", "pos": 0.78125, "end": 0.8125},
	       {"from": "10.20.0.255", "to": "10.20.0.255", "reason": "broadcast", "pos": 0.99609375, "end": 1}],
	     "blocks": [
	       {"cidr": "10.20.0.0/26", "index": 0, "node": "node-a", "inUse": 2, "reserved": 2, "leaks": 1},
	       {"cidr": "10.20.0.128/26", "index": 2, "gap": 1, "node": "node-b", "inUse": 1, "reserved": 0}],
	     "trailingGap": 1},
	    {"name": "b-tiny", "cidr": "10.30.0.0/28", "family": 4, "blockSize": 28, "blockAddrs": 16, "blockBits": 0,
	     "numBlocks": 1, "layout": "linear", "usable": 14, "claimed": 1, "inUse": 2, "borrowed": 1, "leaks": 0,
	     "orphans": 0, "origin": "cli",
	     "reserved": [
	       {"from": "10.30.0.0", "to": "10.30.0.0", "reason": "network", "pos": 0, "end": 0.0625},
	       {"from": "10.30.0.15", "to": "10.30.0.15", "reason": "broadcast", "pos": 0.9375, "end": 1}],
	     "blocks": [
	       {"cidr": "10.30.0.0/28", "index": 0, "node": "node-a", "inUse": 2, "reserved": 2, "borrowed": 1}]},
	    {"name": "c-v6", "cidr": "fd00:10::/64", "family": 6, "blockSize": 122, "blockAddrs": 64, "blockBits": 58,
	     "numBlocks": 288230376151711744, "layout": "compressed", "usable": 18446744073709551615, "claimed": 1,
	     "inUse": 1, "borrowed": 0, "leaks": 0, "orphans": 0, "origin": "cli",
	     "reserved": [{"from": "fd00:10::", "to": "fd00:10::", "reason": "network", "pos": 0, "end": 5.421010862427522e-20}],
	     "blocks": [
	       {"cidr": "fd00:10::/122", "index": 0, "node": "node-a", "inUse": 1, "reserved": 1}],
	     "trailingGap": 288230376151711743}
	  ]}`, "generation", "updated")

	checkJSON(t, "/api/nodes", s.getAny(t, "/api/nodes", 200), `{`+rev+`, "nodes": [
	  {"name": "node-a", "color": "`+colorA+`", "blocks": 3, "addresses": 144, "inUse": 5, "borrowed": 0, "lent": 1, "handles": 3, "leaks": 1},
	  {"name": "node-b", "color": "`+colorB+`", "blocks": 1, "addresses": 64, "inUse": 1, "borrowed": 1, "lent": 0, "handles": 2, "leaks": 0}]}`,
		"generation")

	since := `"since": "2026-03-01T12:00:00Z"`
	tinyWant := `{` + rev + `, "pool": "b-tiny", "cidr": "10.30.0.0/28", "claimed": true, "node": "node-a", "color": "` + colorA + `",
	  "size": 16, "inUse": 2, "reserved": 2, "borrowed": 1, "leaks": 0, "orphans": 0, "map": "rub............r",
	  "addresses": [
	    {"addr": "10.30.0.0", "ordinal": 0, "state": "reserved", "reason": "network"},
	    {"addr": "10.30.0.1", "ordinal": 1, "state": "used", "handle": "net.ctr-tiny-1.eth0", "pod": "tiny-1", "namespace": "default",
	     "node": "node-a", "containerID": "ctr-tiny-1", "ifname": "eth0", ` + since + `},
	    {"addr": "10.30.0.2", "ordinal": 2, "state": "borrowed", "handle": "net.ctr-tiny-2.eth0", "pod": "tiny-2", "namespace": "default",
	     "node": "node-b", "containerID": "ctr-tiny-2", "ifname": "eth0", ` + since + `},
	    {"addr": "10.30.0.15", "ordinal": 15, "state": "reserved", "reason": "broadcast"}]}`
	// Every spelling of the block, and any address in it, names it.
	for _, ref := range []string{"10.30.0.0/28", "10.30.0.0-28", "10.30.0.9"} {
		checkJSON(t, "/api/blocks/"+ref, s.getAny(t, "/api/blocks/"+ref, 200), tinyWant, "generation")
	}

	checkJSON(t, "leaky block", s.getAny(t, "/api/blocks/10.20.0.0/26?pool=a-v4", 200), `{`+rev+`, "pool": "a-v4",
	  "cidr": "10.20.0.0/26", "claimed": true, "node": "node-a", "color": "`+colorA+`", "size": 64, "inUse": 2, "reserved": 2,
	  "borrowed": 0, "leaks": 1, "orphans": 0, "map": "rrl.......u`+strings.Repeat(".", 53)+`",
	  "addresses": [
	    {"addr": "10.20.0.0", "ordinal": 0, "state": "reserved", "reason": "network"},
	    {"addr": "10.20.0.1", "ordinal": 1, "state": "reserved", "reason": "gateway"},
	    {"addr": "10.20.0.2", "ordinal": 2, "state": "leak", "handle": "net.ctr-web-2.eth0", "pod": "web-2", "namespace": "default",
	     "node": "node-a", "containerID": "ctr-web-2", "ifname": "eth0", `+since+`,
	     "leak": {"addr": "10.20.0.2", "handle": "net.ctr-web-2.eth0", "pod": "default/web-2", "reason": "pod default/web-2 is gone",
	              "since": "2026-03-01T13:00:00Z"}},
	    {"addr": "10.20.0.10", "ordinal": 10, "state": "used", "handle": "net.ctr-web-1.eth0", "pod": "web-1", "namespace": "default",
	     "node": "node-a", "containerID": "ctr-web-1", "ifname": "eth0", `+since+`}]}`, "generation")

	checkJSON(t, "unclaimed block", s.getAny(t, "/api/blocks/10.20.0.192/26", 200), `{`+rev+`, "pool": "a-v4",
	  "cidr": "10.20.0.192/26", "claimed": false, "color": "#8c8c8c", "size": 64, "inUse": 0, "reserved": 9, "borrowed": 0,
	  "leaks": 0, "orphans": 0, "map": "........rrrrrrrr`+strings.Repeat(".", 47)+`r",
	  "addresses": [`+reservedRun("10.20.0.", 200, 8, 8, "excluded 10.20.0.200/29")+`,
	    {"addr": "10.20.0.255", "ordinal": 63, "state": "reserved", "reason": "broadcast"}]}`, "generation")

	checkJSON(t, "IPv6 block", s.getAny(t, "/api/blocks/fd00:10::/122", 200), `{`+rev+`, "pool": "c-v6",
	  "cidr": "fd00:10::/122", "claimed": true, "node": "node-a", "color": "`+colorA+`", "size": 64, "inUse": 1, "reserved": 1,
	  "borrowed": 0, "leaks": 0, "orphans": 0, "map": "r....u`+strings.Repeat(".", 58)+`",
	  "addresses": [
	    {"addr": "fd00:10::", "ordinal": 0, "state": "reserved", "reason": "network"},
	    {"addr": "fd00:10::5", "ordinal": 5, "state": "used", "handle": "net.ctr-web-1.eth0", "pod": "web-1", "namespace": "default",
	     "node": "node-a", "containerID": "ctr-web-1", "ifname": "eth0", `+since+`}]}`, "generation")

	for _, c := range []struct{ q, want string }{
		{"tiny-2", `[{"kind": "pod", "label": "default/tiny-2 — 10.30.0.2 on node-b", "pool": "b-tiny", "block": "10.30.0.0/28",
		  "addr": "10.30.0.2", "node": "node-b"}]`},
		{"DEFAULT/WEB", `[
		  {"kind": "pod", "label": "default/web-1 — 10.20.0.10 on node-a", "pool": "a-v4", "block": "10.20.0.0/26", "addr": "10.20.0.10", "node": "node-a"},
		  {"kind": "pod", "label": "default/web-1 — fd00:10::5 on node-a", "pool": "c-v6", "block": "fd00:10::/122", "addr": "fd00:10::5", "node": "node-a"},
		  {"kind": "pod", "label": "default/web-2 — 10.20.0.2 on node-a", "pool": "a-v4", "block": "10.20.0.0/26", "addr": "10.20.0.2", "node": "node-a"}]`},
		{"node-b", `[{"kind": "node", "label": "node node-b — first block 10.20.0.128/26", "pool": "a-v4", "block": "10.20.0.128/26", "node": "node-b"}]`},
		{"ctr-db-1", `[{"kind": "handle", "label": "handle net.ctr-db-1.eth0 — 10.20.0.130 on node-b", "pool": "a-v4",
		  "block": "10.20.0.128/26", "addr": "10.20.0.130", "node": "node-b"}]`},
		{"10.30.0.2", `[{"kind": "address", "label": "10.30.0.2 — default/tiny-2 on node-b (borrowed)", "pool": "b-tiny",
		  "block": "10.30.0.0/28", "addr": "10.30.0.2", "node": "node-b"}]`},
		{"fd00:10::5", `[{"kind": "address", "label": "fd00:10::5 — default/web-1 on node-a", "pool": "c-v6",
		  "block": "fd00:10::/122", "addr": "fd00:10::5", "node": "node-a"}]`},
		{"10.20.0.70", `[{"kind": "address", "label": "10.20.0.70 — free (block 10.20.0.64/26 is not claimed)", "pool": "a-v4",
		  "block": "10.20.0.64/26", "addr": "10.20.0.70"}]`},
		{"10.20.0.201", `[{"kind": "address", "label": "10.20.0.201 — reserved: excluded 10.20.0.200/29", "pool": "a-v4",
		  "block": "10.20.0.192/26", "addr": "10.20.0.201"}]`},
		{"10.20.0.128/26", `[{"kind": "block", "label": "block 10.20.0.128/26 of pool a-v4", "pool": "a-v4", "block": "10.20.0.128/26", "node": "node-b"}]`},
		{"192.168.1.1", `[]`},
		{"nobody", `[]`},
	} {
		got := s.getAny(t, "/api/search?q="+urlQuery(c.q), 200)
		checkJSON(t, "search "+c.q, got, `{"query": "`+c.q+`", "results": `+c.want+`}`)
	}
}

// reservedRun is the JSON of n consecutive reserved addresses.
func reservedRun(prefix string, first, ordinal, n int, reason string) string {
	var parts []string
	for i := range n {
		parts = append(parts, `{"addr": "`+prefix+itoa(first+i)+`", "ordinal": `+itoa(ordinal+i)+`, "state": "reserved", "reason": "`+reason+`"}`)
	}
	return strings.Join(parts, ",")
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

func urlQuery(s string) string {
	return strings.NewReplacer("/", "%2F", ":", "%3A", " ", "+").Replace(s)
}

// TestAPIErrors: malformed and unknown references are refused with a
// message naming them, and nothing but GET and HEAD is served.
func TestAPIErrors(t *testing.T) {
	dir := t.TempDir()
	writeFixture(t, dir)
	s := startUI(t, localOpts(dir))
	for _, c := range []struct {
		path string
		code int
		msg  string
	}{
		{"/api/blocks/not-a-block", 400, `"not-a-block" is not a block`},
		{"/api/blocks/10.20.0.0/25", 400, "10.20.0.0/25 is not a block of pool \"a-v4\" (its blocks are /26: 10.20.0.0/26)"},
		{"/api/blocks/192.168.0.0/24", 404, "no pool holds 192.168.0.0/24"},
		{"/api/blocks/10.30.0.0/28?pool=a-v4", 404, "no pool holds 10.30.0.0/28"},
		{"/api/search?q=", 400, "q is empty"},
		{"/api/search?q=" + strings.Repeat("x", 257), 400, "longer than 256"},
		{"/api/nothing", 404, "no such API: /api/nothing"},
	} {
		got := s.getAny(t, c.path, c.code).(map[string]any)
		if msg, _ := got["error"].(string); !strings.Contains(msg, c.msg) {
			t.Errorf("GET %s: error %q, want it to contain %q", c.path, msg, c.msg)
		}
	}
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		req, _ := http.NewRequest(m, s.srv.URL+"/api/pools", nil)
		if code := statusOf(t, s.srv.Client(), req); code != http.StatusMethodNotAllowed {
			t.Errorf("%s /api/pools: %d, want 405", m, code)
		}
	}
}
