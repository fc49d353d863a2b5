package etcd

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"time"
)

// Connect starts dialing, in the background, the member the first request
// will be sent to (with https, the TLS handshake included), and returns
// at once. That request's transport then
// takes the connection (or the dial's error) instead of dialing itself:
// a caller that waits for something before its first request (a plugin
// process for its node lock) connects meanwhile. A connection no request
// took is closed by Close. Calling Connect again before a request took the
// first connection does nothing.
func (s *Store) Connect(ctx context.Context) {
	ep := s.c.eps[int(s.c.cur.Load())%len(s.c.eps)]
	ep.connect(ctx)
}

// earlyConn is a dial started by Connect.
type earlyConn struct {
	done chan struct{}
	conn net.Conn
	err  error
}

// early holds an endpoint's dial started by Connect until its transport
// takes it.
type early struct {
	mu      sync.Mutex
	pending *earlyConn
	// dial and addr are what the transport dials: the dial function and
	// the host:port it is called with.
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	addr string
}

// connect starts dialing, unless a dial is already pending.
func (ep *endpoint) connect(ctx context.Context) {
	e := &ep.early
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.pending != nil {
		return
	}
	c := &earlyConn{done: make(chan struct{})}
	e.pending = c
	go func() {
		defer close(c.done)
		c.conn, c.err = e.dial(ctx, "tcp", e.addr)
	}()
}

// dialContext is the transport's dial: the pending early dial when there
// is one for addr (its connection or its error: a failed attempt, which
// the client retries as any failed dial), else a new one.
func (ep *endpoint) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	e := &ep.early
	e.mu.Lock()
	c := e.pending
	if addr != e.addr {
		c = nil
	}
	if c != nil {
		e.pending = nil
	}
	e.mu.Unlock()
	if c == nil {
		return e.dial(ctx, network, addr)
	}
	select {
	case <-c.done:
		return c.conn, c.err
	case <-ctx.Done():
		go closeWhenDone(c)
		return nil, ctx.Err()
	}
}

// dropEarly closes a connection no request took.
func (ep *endpoint) dropEarly() {
	e := &ep.early
	e.mu.Lock()
	c := e.pending
	e.pending = nil
	e.mu.Unlock()
	if c != nil {
		go closeWhenDone(c)
	}
}

func closeWhenDone(c *earlyConn) {
	<-c.done
	if c.conn != nil {
		_ = c.conn.Close()
	}
}

// dialTLS returns a dial that connects with dial and completes a TLS
// handshake with cfg for host (scheme-less, maybe with a port) within
// timeout, offering HTTP/2 only: the transport's TLS dial.
func dialTLS(dial func(ctx context.Context, network, addr string) (net.Conn, error), cfg *tls.Config, host string, timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"}
	if cfg.ServerName == "" {
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		cfg.ServerName = host
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		hctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(hctx); err != nil {
			_ = c.Close()
			return nil, err
		}
		return tc, nil
	}
}

// transportAddr is the host:port the transport dials for base
// (scheme://host[:port]).
func transportAddr(scheme, host string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	if scheme == "https" {
		return net.JoinHostPort(host, "443")
	}
	return net.JoinHostPort(host, "80")
}
