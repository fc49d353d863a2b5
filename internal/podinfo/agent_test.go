package podinfo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAgentErrorRoundTrip: every sentinel the agent answers comes back to
// the plugin as the same sentinel, its message said once.
func TestAgentErrorRoundTrip(t *testing.T) {
	for _, sentinel := range []error{ErrPodNotFound, ErrNodeNotFound, ErrDenied, ErrWrongNode, ErrUnavailable} {
		in := fmt.Errorf("%w: pod ns/p: detail", sentinel)
		ae, status := AgentErrorOf(in)
		if status < 400 {
			t.Errorf("%v: status %d", sentinel, status)
		}
		out := ae.Err("/run/a.sock")
		if !errors.Is(out, sentinel) || strings.Count(out.Error(), sentinel.Error()) != 1 ||
			!strings.Contains(out.Error(), "/run/a.sock") || !strings.Contains(out.Error(), "pod ns/p: detail") {
			t.Errorf("%v came back as %q", sentinel, out)
		}
	}
	if ae, _ := AgentErrorOf(errors.New("other")); !errors.Is(ae.Err("/s"), ErrUnavailable) {
		t.Errorf("an unknown error is %+v, want Unavailable", ae)
	}
	if err := (AgentError{Reason: "Teapot", Message: "x"}).Err("/s"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("an unknown reason: %v, want ErrUnavailable", err)
	}
}

// serveUnix serves h on a unix socket in a new directory.
func serveUnix(t *testing.T, h http.Handler) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ipk-podinfo-") // short: sun_path
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "a.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return sock
}

// TestAgentClient: what the plugin makes of an agent's answers and of
// what it finds at the socket path.
func TestAgentClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	notReady := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(AgentError{Reason: ReasonUnavailable, Message: "caches not synced yet"})
	}))
	incomplete := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"node": {"name": "n", "podCIDRs": ["10.0.0.0/24", "fd00::/64"]}}`))
	}))
	dir := t.TempDir()
	file := filepath.Join(dir, "file.sock")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	c := NewAgentClient(notReady)
	if err := c.Ready(ctx); !errors.Is(err, ErrAgentNotReady) || errors.Is(err, ErrAgentUnreachable) || !strings.Contains(err.Error(), "not synced") {
		t.Errorf("503: %v, want ErrAgentNotReady with the agent's reason", err)
	}
	c = NewAgentClient(incomplete)
	if _, err := c.Lookup(ctx, "ns", "p", "uid", "n"); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "incomplete") {
		t.Errorf("an answer without the pod: %v, want ErrUnavailable", err)
	}
	if info, err := c.Lookup(ctx, "", "", "", "n"); err != nil || len(info.Node.PodCIDRs) != 2 {
		t.Errorf("node only: %+v, %v; want both pod CIDRs (IPv4 and IPv6)", info, err)
	}
	for name, path := range map[string]string{"missing": filepath.Join(dir, "none.sock"), "regular file": file} {
		_, err := NewAgentClient(path).Lookup(ctx, "ns", "p", "", "n")
		if !errors.Is(err, ErrAgentUnreachable) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want ErrAgentUnreachable naming %s", name, err, path)
		}
	}
	// Another user's socket is not trusted (root can make one to try).
	if os.Geteuid() == 0 {
		other := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		if err := os.Lchown(other, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		err := NewAgentClient(other).Ready(ctx)
		if !errors.Is(err, ErrAgentUnreachable) || !strings.Contains(err.Error(), "uid 65534") {
			t.Errorf("a socket of uid 65534: %v, want ErrAgentUnreachable naming the owner", err)
		}
	}
}

// TestAgentClientSilentAgent: an agent that accepts the connection and
// never answers is unreachable (the plugin then falls back to the
// kubeconfig) rather than holding the ADD forever: the connection's
// deadline is the context's, at most the client's own timeout.
func TestAgentClientSilentAgent(t *testing.T) {
	dir, err := os.MkdirTemp("", "ipk-podinfo-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "a.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	held := make(chan net.Conn, 1)
	go func() {
		if c, err := l.Accept(); err == nil {
			held <- c // never answered
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := NewAgentClient(sock).Lookup(ctx, "ns", "p", "", "n")
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrAgentUnreachable) {
			t.Errorf("silent agent: %v, want ErrAgentUnreachable", err)
		}
	case <-time.After(time.Minute): // a guard against hanging, not a timing check
		t.Fatal("Lookup did not return after its context ended")
	}
	select {
	case c := <-held:
		c.Close()
	default:
	}
}
