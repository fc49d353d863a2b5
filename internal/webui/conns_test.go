package webui

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// patience bounds every wait of these tests for something the server
// must do: far longer than the limits they set, so that only a server
// that never does it fails.
const patience = 30 * time.Second

// serveGuarded serves the fixture's map with token "T" on a loopback
// listener under limits, until the test ends; it returns the address and
// the store's directory.
func serveGuarded(t *testing.T, limits serverLimits) (string, string) {
	t.Helper()
	dir := t.TempDir()
	writeFixture(t, dir)
	opts := localOpts(dir)
	opts.Listen, opts.Token = "127.0.0.1:0", "T"
	u, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	u.limits = limits
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- u.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return l.Addr().String(), dir
}

// slowLimits are limits no test waits out unless it means to.
var slowLimits = serverLimits{readHeader: time.Hour, read: time.Hour, write: time.Hour, idle: time.Hour, maxPending: 1000}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// request sends one GET on c and reads the answer.
func request(t *testing.T, c net.Conn, r *bufio.Reader, method, path, auth string) *http.Response {
	t.Helper()
	req := method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n"
	if auth != "" {
		req += "Authorization: Bearer " + auth + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(patience))
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// closedByServer waits (at most patience) for the server to close c: a
// read that ends in EOF or a reset, not in the test's own deadline.
func closedByServer(c net.Conn, r io.Reader) error {
	_ = c.SetReadDeadline(time.Now().Add(patience))
	n, err := io.Copy(io.Discard, r)
	switch {
	case err == nil, errors.Is(err, syscall.ECONNRESET):
		return nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return errors.New("the server kept the connection open")
	default:
		return errors.New("read " + itoa(int(n)) + " bytes, then: " + err.Error())
	}
}

// TestRefusedConnectionsClosed: a request the guard refuses (no token, a
// wrong one, a write method) is answered and its connection closed — with
// every other limit an hour long, so that it is the refusal that closes.
func TestRefusedConnectionsClosed(t *testing.T) {
	addr, _ := serveGuarded(t, slowLimits)
	for _, c := range []struct {
		method, auth string
		want         int
	}{
		{"GET", "", http.StatusUnauthorized},
		{"GET", "wrong", http.StatusUnauthorized},
		{"POST", "T", http.StatusMethodNotAllowed},
	} {
		conn := dial(t, addr)
		r := bufio.NewReader(conn)
		resp := request(t, conn, r, c.method, "/api/pools", c.auth)
		if resp.StatusCode != c.want || !resp.Close {
			t.Errorf("%s with token %q: %d, close %v; want %d and Connection: close", c.method, c.auth, resp.StatusCode, resp.Close, c.want)
		}
		if err := closedByServer(conn, r); err != nil {
			t.Errorf("%s with token %q: after the %d: %v", c.method, c.auth, resp.StatusCode, err)
		}
	}
	// An authorized connection is kept alive for the next request.
	conn := dial(t, addr)
	r := bufio.NewReader(conn)
	for range 2 {
		if resp := request(t, conn, r, "GET", "/api/pools", "T"); resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("authorized GET: %d, close %v", resp.StatusCode, resp.Close)
		}
	}
}

// TestIdleAndSlowClientsClosed: a connection that sends nothing, one that
// trickles its header a byte at a time (slowloris) and an authorized one
// that goes idle are all closed by the server.
func TestIdleAndSlowClientsClosed(t *testing.T) {
	limits := slowLimits
	limits.readHeader, limits.read, limits.idle = 300*time.Millisecond, 600*time.Millisecond, 300*time.Millisecond
	addr, _ := serveGuarded(t, limits)

	silent := dial(t, addr)
	if err := closedByServer(silent, silent); err != nil {
		t.Errorf("a connection that never sends: %v", err)
	}

	slow := dial(t, addr)
	closed := make(chan error, 1)
	go func() { closed <- closedByServer(slow, slow) }()
	header := "GET /api/pools HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + strings.Repeat("a", 2000)
	wrote := 0
trickle:
	for ; wrote < len(header); wrote++ {
		select {
		case err := <-closed:
			if err != nil {
				t.Errorf("a trickled header: %v", err)
			}
			break trickle
		case <-time.After(10 * time.Millisecond):
		}
		if _, err := slow.Write([]byte{header[wrote]}); err != nil {
			break // closed: the reader reports how
		}
	}
	if wrote == len(header) {
		t.Errorf("the server read a header trickled for %d bytes without closing the connection", wrote)
	}

	idle := dial(t, addr)
	r := bufio.NewReader(idle)
	if resp := request(t, idle, r, "GET", "/api/pools", "T"); resp.StatusCode != http.StatusOK {
		t.Fatalf("authorized GET: %d", resp.StatusCode)
	}
	if err := closedByServer(idle, r); err != nil {
		t.Errorf("an authorized connection gone idle: %v", err)
	}
}

// TestPendingConnectionsBounded: at most maxPending connections without
// an authorized request stay open: each new one closes the oldest, a new
// client still gets in, and authorized connections do not count.
func TestPendingConnectionsBounded(t *testing.T) {
	limits := slowLimits
	limits.maxPending = 3
	addr, _ := serveGuarded(t, limits)

	authed := dial(t, addr)
	ar := bufio.NewReader(authed)
	if resp := request(t, authed, ar, "GET", "/api/pools", "T"); resp.StatusCode != http.StatusOK {
		t.Fatalf("authorized GET: %d", resp.StatusCode)
	}
	var idle []net.Conn
	for range 3 {
		idle = append(idle, dial(t, addr))
	}
	// A request on a fourth new connection is answered: the server
	// accepted it, and to keep three pending it closed the oldest.
	fourth := dial(t, addr)
	if resp := request(t, fourth, bufio.NewReader(fourth), "GET", "/api/pools", "T"); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET on a new connection past the bound: %d", resp.StatusCode)
	}
	if err := closedByServer(idle[0], idle[0]); err != nil {
		t.Errorf("the oldest pending connection: %v", err)
	}
	for i, c := range idle[1:] {
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("pending connection %d of 3 (within the bound): %v, want it still open", i+2, err)
		}
	}
	// The authorized connection was never pending: still served.
	if resp := request(t, authed, ar, "GET", "/api/pools", "T"); resp.StatusCode != http.StatusOK {
		t.Fatalf("second GET on the authorized connection: %d", resp.StatusCode)
	}
}

// TestEventStreamOutlivesTimeouts: the event stream of an authorized page
// still delivers an update long after the server's read and write
// timeouts passed.
func TestEventStreamOutlivesTimeouts(t *testing.T) {
	limits := slowLimits
	limits.readHeader, limits.read, limits.write = 200*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond
	addr, dir := serveGuarded(t, limits)
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/api/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer T")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := make(chan string, 16)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data: ") {
				events <- sc.Text()
			}
		}
	}()
	next := func(what string) string {
		t.Helper()
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("the event stream ended before %s", what)
			}
			return ev
		case <-time.After(patience):
			t.Fatalf("no event for %s", what)
		}
		return ""
	}
	for !strings.Contains(next("the first full read"), `"loaded":true`) {
	}
	time.Sleep(5 * limits.read) // past every timeout of the server
	// The local store's lock wait ends with ctx.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := datastore.Open(ctx, config.Datastore{Type: config.DatastoreLocal, Path: dir}, datastore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = allocator.New(st, nil).Allocate(context.Background(), allocator.Request{Handle: ipam.Handle{ID: "net.late.eth0",
		Network: "net", ContainerID: "late", IfName: "eth0", Node: "node-a"}, Sets: [][]string{{"a-v4"}}})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	next("the allocation made after the timeouts")
}

// TestTokenRedirectStaysOnOrigin: a visit with ?token= is sent on to a
// path of the same origin, whatever its last segment looks like once a
// browser reads the Location (backslashes as slashes, tabs and newlines
// dropped).
func TestTokenRedirectStaysOnOrigin(t *testing.T) {
	addr, _ := serveGuarded(t, slowLimits)
	base, err := url.Parse("http://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{"/%5C%5Cevil.example", ""},
		{"/%5Cevil.example", ""},
		{"/%2F%2Fevil.example", ""},
		{"//evil.example", ""},
		{"///evil.example", ""},
		{"/x/%5C%5Cevil.example", ""},
		{"/%5C/evil.example", ""},
		{"/https:evil.example", ""},
		{"/https:%2F%2Fevil.example", ""},
		{"/http:%5C%5Cevil.example", ""},
		{"/javascript:alert(1)", ""},
		{"/%09%5C%5Cevil.example", ""},
		{"/%0D%0A%5C%5Cevil.example", ""},
		{"/@evil.example", ""},
		{"/.%2E%2F%2Fevil.example", ""},
		{"/", "./"},
		{"/index.html", "./index.html"},
		{"/assets/app.js", "./app.js"},
	} {
		conn := dial(t, addr)
		resp := request(t, conn, bufio.NewReader(conn), "GET", c.path+"?token=T&q=x", "")
		loc := resp.Header.Get("Location")
		if resp.StatusCode != http.StatusSeeOther {
			t.Errorf("GET %s?token=T: %d, want 303", c.path, resp.StatusCode)
			continue
		}
		if c.want != "" && loc != c.want+"?q=x" {
			t.Errorf("GET %s?token=T: Location %q, want %q", c.path, loc, c.want+"?q=x")
		}
		browser := strings.NewReplacer("\\", "/", "\t", "", "\n", "", "\r", "").Replace(loc)
		ref, err := url.Parse(browser)
		if err != nil {
			continue // a browser does not follow it either
		}
		path, err := url.ParseRequestURI(c.path)
		if err != nil {
			t.Fatal(err)
		}
		from := &url.URL{Scheme: base.Scheme, Host: base.Host, Path: path.Path, RawPath: path.RawPath}
		to := from.ResolveReference(ref)
		if to.Scheme != base.Scheme || to.Host != base.Host || to.Opaque != "" {
			t.Errorf("GET %s?token=T: Location %q leads to %s, off the map's origin %s", c.path, loc, to, base)
		}
	}
}
