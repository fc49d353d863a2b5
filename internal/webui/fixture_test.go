package webui

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
)

// fixtureTime is when every fixture handle was created.
var fixtureTime = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// The fixture's pools: IPv4 with a gateway and an exclude, a one-block
// IPv4 pool where a second node must borrow, and an IPv6 /64.
var (
	poolV4 = ipam.Pool{Name: "a-v4", CIDR: netip.MustParsePrefix("10.20.0.0/24"), BlockSize: 26,
		Gateway: netip.MustParseAddr("10.20.0.1"), Exclude: []netip.Prefix{netip.MustParsePrefix("10.20.0.200/29")}, Origin: "cli"}
	poolTiny = ipam.Pool{Name: "b-tiny", CIDR: netip.MustParsePrefix("10.30.0.0/28"), BlockSize: 28, Origin: "cli"}
	poolV6   = ipam.Pool{Name: "c-v6", CIDR: netip.MustParsePrefix("fd00:10::/64"), BlockSize: 122, Origin: "cli"}
)

// fixtureAlloc is one attachment of the fixture.
type fixtureAlloc struct {
	id, node, pod string
	sets          [][]string
	want          []string
}

// The fixture's attachments, in order. web-1 is dual-stack; tiny-2 on
// node-b borrows from node-a's only block of b-tiny.
var fixtureAllocs = []fixtureAlloc{
	{id: "net.ctr-web-1.eth0", node: "node-a", pod: "web-1", sets: [][]string{{"a-v4"}, {"c-v6"}}, want: []string{"10.20.0.10", "fd00:10::5"}},
	{id: "net.ctr-web-2.eth0", node: "node-a", pod: "web-2", sets: [][]string{{"a-v4"}}},
	{id: "net.ctr-db-1.eth0", node: "node-b", pod: "db-1", sets: [][]string{{"a-v4"}}, want: []string{"10.20.0.130"}},
	{id: "net.ctr-tiny-1.eth0", node: "node-a", pod: "tiny-1", sets: [][]string{{"b-tiny"}}},
	{id: "net.ctr-tiny-2.eth0", node: "node-b", pod: "tiny-2", sets: [][]string{{"b-tiny"}}},
}

// writeFixture fills the local store in dir through the allocator and
// closes it again; it returns the handles as stored.
func writeFixture(t *testing.T, dir string) map[string]ipam.Handle {
	t.Helper()
	st := openLocal(t, dir)
	defer st.Close()
	return fillFixture(t, st)
}

// openLocal opens the typed local store in dir as the CLI does.
func openLocal(t *testing.T, dir string) store.Store {
	t.Helper()
	st, err := datastore.Open(context.Background(), config.Datastore{Type: config.DatastoreLocal, Path: dir}, datastore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func fillFixture(t *testing.T, st store.Store) map[string]ipam.Handle {
	t.Helper()
	ctx := context.Background()
	a := allocator.New(st, nil)
	a.Now = func() time.Time { return fixtureTime }
	for _, p := range []ipam.Pool{poolV4, poolTiny, poolV6} {
		if err := a.CreatePool(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	out := map[string]ipam.Handle{}
	for _, f := range fixtureAllocs {
		req := allocator.Request{Handle: ipam.Handle{ID: f.id, Network: "net", ContainerID: "ctr-" + f.pod, IfName: "eth0",
			Node: f.node, Namespace: "default", Pod: f.pod}, Sets: f.sets}
		for _, w := range f.want {
			req.Want = append(req.Want, netip.MustParseAddr(w))
		}
		h, err := a.Allocate(ctx, req)
		if err != nil {
			t.Fatalf("allocate %s: %v", f.id, err)
		}
		out[f.pod] = h
	}
	return out
}

// staticLeaks is a LeakSource whose candidates the test sets.
type staticLeaks struct {
	mu sync.Mutex
	l  []LeakCandidate
}

func (s *staticLeaks) LeakCandidates() []LeakCandidate {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]LeakCandidate(nil), s.l...)
}

func (s *staticLeaks) set(l ...LeakCandidate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.l = l
}

// started is a running map over a datastore with an HTTP test server.
type started struct {
	u   *UI
	srv *httptest.Server
}

// startUI runs the map over opts until the test ends and waits for its
// first full read.
func startUI(t *testing.T, opts Options) *started {
	t.Helper()
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:0"
	}
	u, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = u.Run(ctx); close(done) }()
	srv := httptest.NewServer(u)
	t.Cleanup(func() { srv.Close(); cancel(); <-done })
	waitFor(t, u, "the first read", func() bool { return u.m.loaded })
	return &started{u: u, srv: srv}
}

// localOpts shows the local store in dir.
func localOpts(dir string) Options {
	return Options{Datastore: config.Datastore{Type: config.DatastoreLocal, Path: dir}}
}

// waitFor waits (at most 30 s) for cond, checked under the model's read
// lock after every change of the model.
func waitFor(t *testing.T, u *UI, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		gen, ch := u.m.wait()
		u.m.mu.RLock()
		ok := cond()
		u.m.mu.RUnlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("waiting for %s: not seen after 30 s (generation %d)", what, gen)
		}
	}
}

// getJSON fetches path and decodes the answer into v, failing the test
// unless the status is want.
func (s *started) getJSON(t *testing.T, path string, want int, v any) {
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
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("GET %s: Content-Type %q", path, ct)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("GET %s: decoding %s: %v", path, body, err)
	}
}

func statusOf(t *testing.T, c *http.Client, req *http.Request) int {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// localRevision is the revision of the local store in dir.
func localRevision(t *testing.T, dir string) int64 {
	t.Helper()
	st := openLocal(t, dir)
	defer st.Close()
	rev, err := st.(*kvbacked.Store).Revision(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rev
}
