package etcdtest

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy forwards TCP connections on a loopback port to a target address
// (an etcd member), so that a test can cut a client's connections and
// refuse new ones while the member keeps running.
type Proxy struct {
	l       net.Listener
	mu      sync.Mutex
	conns   []net.Conn
	refused bool
	// forwarded counts the connections forwarded so far; more is closed
	// (and replaced) at each.
	forwarded int
	more      chan struct{}
}

// NewProxy listens on a loopback port and forwards every connection to
// target ("host:port") until the test ends.
func NewProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{l: l, more: make(chan struct{})}
	tb.Cleanup(func() { l.Close(); p.Cut() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			refused := p.refused
			p.mu.Unlock()
			if refused {
				c.Close()
				continue
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.forwarded++
			close(p.more)
			p.more = make(chan struct{})
			p.mu.Unlock()
			go func() { _, _ = io.Copy(u, c); u.Close() }()
			go func() { _, _ = io.Copy(c, u); c.Close() }()
		}
	}()
	return p
}

// Addr is the proxy's "host:port".
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// Refuse makes the proxy close new connections at once (on) or forward
// them again (off).
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refused = on
}

// WaitForwarded waits until the proxy has forwarded n connections since
// it started, failing the test after ten seconds.
func (p *Proxy) WaitForwarded(tb testing.TB, n int) {
	tb.Helper()
	timeout := time.After(10 * time.Second)
	for {
		p.mu.Lock()
		got, more := p.forwarded, p.more
		p.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-more:
		case <-timeout:
			tb.Fatalf("proxy: %d connections forwarded after 10s, want %d", got, n)
		}
	}
}

// Forwarded is the number of connections the proxy has forwarded.
func (p *Proxy) Forwarded() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.forwarded
}

// Cut closes every connection open through the proxy.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
