package webui

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestNeedsToken(t *testing.T) {
	for _, c := range []struct {
		listen string
		need   bool
	}{
		{"127.0.0.1:7474", false},
		{"[::1]:7474", false},
		{"127.10.0.3:80", false},
		{"localhost:7474", false},
		{"[::ffff:127.0.0.1]:7474", false},
		{"0.0.0.0:7474", true},
		{"[::]:7474", true},
		{":7474", true},
		{"10.0.0.5:7474", true},
		{"[fd00::5]:7474", true},
		{"ipkeeper.example:7474", true},
	} {
		got, err := NeedsToken(c.listen)
		if err != nil || got != c.need {
			t.Errorf("NeedsToken(%q) = %v, %v; want %v", c.listen, got, err, c.need)
		}
	}
	for _, bad := range []string{"", "127.0.0.1", "[::1]", "no-port"} {
		if _, err := NeedsToken(bad); err == nil || !strings.Contains(err.Error(), "want host:port") {
			t.Errorf("NeedsToken(%q): %v, want an error asking for host:port", bad, err)
		}
	}
}

// TestNewRefusesOpenListenWithoutToken: beyond loopback, no token means no
// map, for IPv4 and IPv6 alike.
func TestNewRefusesOpenListenWithoutToken(t *testing.T) {
	for _, listen := range []string{"0.0.0.0:7474", "[::]:7474", "10.1.2.3:80", "[fd00::1]:80"} {
		_, err := New(Options{Listen: listen})
		if !errors.Is(err, ErrNeedToken) || !strings.Contains(err.Error(), listen) || !strings.Contains(err.Error(), TokenEnv) {
			t.Errorf("New(Listen %s) without a token: %v, want ErrNeedToken naming the address and $%s", listen, err, TokenEnv)
		}
		if _, err := New(Options{Listen: listen, Token: "s3cret"}); err != nil {
			t.Errorf("New(Listen %s) with a token: %v", listen, err)
		}
	}
}

// authCase is one request to a guarded map.
type authCase struct {
	name   string
	header string // Authorization
	cookie string
	query  string
	host   string
	want   int
}

func runAuth(t *testing.T, u *UI, cases []authCase) {
	t.Helper()
	for _, c := range cases {
		req := httptest.NewRequest(http.MethodGet, "/api/nodes"+c.query, nil)
		if c.host != "" {
			req.Host = c.host
		}
		if c.header != "" {
			req.Header.Set("Authorization", c.header)
		}
		if c.cookie != "" {
			req.AddCookie(&http.Cookie{Name: tokenCookie, Value: c.cookie})
		}
		w := httptest.NewRecorder()
		u.ServeHTTP(w, req)
		if w.Code != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, w.Code, w.Body, c.want)
		}
		if w.Code == http.StatusUnauthorized && !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: 401 without a WWW-Authenticate: Bearer challenge", c.name)
		}
	}
}

// TestAuthBeyondLoopback: bound beyond loopback, every request needs the
// token, as a bearer header or the cookie the page sets.
func TestAuthBeyondLoopback(t *testing.T) {
	for _, listen := range []string{"0.0.0.0:7474", "[::]:7474"} {
		u, err := New(Options{Listen: listen, Token: "s3cret"})
		if err != nil {
			t.Fatal(err)
		}
		runAuth(t, u, []authCase{
			{name: listen + " no token", host: "10.0.0.5:7474", want: 401},
			{name: listen + " wrong token", header: "Bearer nope", want: 401},
			{name: listen + " basic auth", header: "Basic czNjcmV0", want: 401},
			{name: listen + " token in the API's query", query: "?token=s3cret", want: 401},
			{name: listen + " bearer", header: "Bearer s3cret", host: "10.0.0.5:7474", want: 200},
			{name: listen + " bearer, other case", header: "bearer s3cret", want: 200},
			{name: listen + " cookie", cookie: "s3cret", want: 200},
			{name: listen + " wrong cookie", cookie: "s3cre", want: 401},
		})
	}
}

// TestAuthAuthenticator: a token the Authenticate hook approves is let in;
// one it refuses, or fails to judge, is not.
func TestAuthAuthenticator(t *testing.T) {
	u, err := New(Options{Listen: "0.0.0.0:1", Authenticate: func(_ context.Context, tok string) (bool, error) {
		switch tok {
		case "reviewed":
			return true, nil
		case "broken":
			return true, errors.New("TokenReview failed")
		}
		return false, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	runAuth(t, u, []authCase{
		{name: "approved", header: "Bearer reviewed", want: 200},
		{name: "refused", header: "Bearer other", want: 401},
		{name: "review failed", header: "Bearer broken", want: 401},
		{name: "none", want: 401},
	})
}

// TestAuthLoopback: on loopback no token is needed, but a Host header that
// is not a loopback name is refused (a rebound DNS name cannot read the
// map); a token, when configured, is required there too.
func TestAuthLoopback(t *testing.T) {
	for _, listen := range []string{"127.0.0.1:7474", "[::1]:7474"} {
		u, err := New(Options{Listen: listen})
		if err != nil {
			t.Fatal(err)
		}
		runAuth(t, u, []authCase{
			{name: listen + " 127.0.0.1", host: "127.0.0.1:7474", want: 200},
			{name: listen + " [::1]", host: "[::1]:7474", want: 200},
			{name: listen + " localhost", host: "localhost:7474", want: 200},
			{name: listen + " rebound name", host: "evil.example:7474", want: 403},
		})
		u, err = New(Options{Listen: listen, Token: "s3cret"})
		if err != nil {
			t.Fatal(err)
		}
		runAuth(t, u, []authCase{
			{name: listen + " token set, none sent", host: "127.0.0.1:7474", want: 401},
			{name: listen + " token set and sent", host: "127.0.0.1:7474", header: "Bearer s3cret", want: 200},
		})
	}
}

// TestTokenInPageURLSetsCookie: opening the page with ?token= keeps the
// token in an HttpOnly cookie and redirects to the address without it.
func TestTokenInPageURLSetsCookie(t *testing.T) {
	u, err := New(Options{Listen: "0.0.0.0:7474", Token: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ url, loc string }{{"/?token=s3cret", "./"}, {"/?token=s3cret&x=1", "./?x=1"}} {
		w := httptest.NewRecorder()
		u.ServeHTTP(w, httptest.NewRequest(http.MethodGet, c.url, nil))
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != c.loc {
			t.Fatalf("%s: %d Location %q, want 303 to %q", c.url, w.Code, w.Header().Get("Location"), c.loc)
		}
		ck := w.Result().Cookies()
		if len(ck) != 1 || ck[0].Name != tokenCookie || ck[0].Value != "s3cret" || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode {
			t.Fatalf("%s: cookies %+v", c.url, ck)
		}
	}
	w := httptest.NewRecorder()
	u.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/?token=wrong", nil))
	if w.Code != http.StatusUnauthorized || len(w.Result().Cookies()) != 0 {
		t.Fatalf("a wrong token in the page URL: %d, cookies %v", w.Code, w.Result().Cookies())
	}
}

// TestServeOnAllInterfaces: a real listener on 0.0.0.0 (reached through
// loopback only) answers 401 without the token and 200 with it; and a map
// configured for loopback refuses to serve on it.
func TestServeOnAllInterfaces(t *testing.T) {
	dir := t.TempDir()
	writeFixture(t, dir)
	l, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	loop, err := New(Options{Datastore: localOpts(dir).Datastore, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := loop.Serve(context.Background(), l); !errors.Is(err, ErrNeedToken) {
		t.Fatalf("serving a loopback-configured map on %s: %v, want ErrNeedToken", l.Addr(), err)
	}
	opts := localOpts(dir)
	opts.Listen, opts.Token = l.Addr().String(), "s3cret"
	u, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- u.Serve(ctx, l) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	url := "http://127.0.0.1:" + itoa(port) + "/api/pools"
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if code := statusOf(t, http.DefaultClient, req); code != http.StatusUnauthorized {
		t.Errorf("GET %s without a token: %d, want 401", url, code)
	}
	req, _ = http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	if code := statusOf(t, http.DefaultClient, req); code != http.StatusOK {
		t.Errorf("GET %s with the token: %d, want 200", url, code)
	}
}
