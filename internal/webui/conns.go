package webui

import (
	"container/list"
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// serverLimits bound what a client costs the map's HTTP server (Serve)
// before and after it proved it may read the map.
type serverLimits struct {
	// readHeader bounds the arrival of a request's header: a new
	// connection that sends nothing, or trickles its header, is closed
	// after it.
	readHeader time.Duration
	// read bounds the arrival of a whole request.
	read time.Duration
	// write bounds the writing of an answer; an event stream bounds each
	// event by it instead (serveEvents).
	write time.Duration
	// idle is how long a kept-alive connection waits for its next request.
	idle time.Duration
	// maxPending is how many connections may be open that no request has
	// yet been authorized on: past it, the oldest of them is closed.
	maxPending int
}

// defaultLimits are Serve's limits. A guarded page loads in a few
// requests on one or two connections; a refused request closes its
// connection (guard).
var defaultLimits = serverLimits{
	readHeader: 5 * time.Second,
	read:       10 * time.Second,
	write:      30 * time.Second,
	idle:       time.Minute,
	maxPending: 64,
}

// maxHeaderBytes bounds a request's header (the token cookie and a
// browser's headers fit many times over).
const maxHeaderBytes = 64 << 10

// newServer returns the HTTP server of Serve: handler under u's limits,
// over a listener from gate.
func (u *UI) newServer(ctx context.Context, handler http.Handler) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: u.limits.readHeader,
		ReadTimeout:       u.limits.read,
		WriteTimeout:      u.limits.write,
		IdleTimeout:       u.limits.idle,
		MaxHeaderBytes:    maxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
	}
}

// connKey keys a request's connection in its context.
type connKey struct{}

// markAuthorized records that a request on r's connection was let through
// the guard: the connection no longer counts against maxPending.
func markAuthorized(r *http.Request) {
	if c, ok := r.Context().Value(connKey{}).(*gatedConn); ok {
		c.authorized()
	}
}

// gatedListener counts the connections on which no request has been
// authorized yet and closes the oldest of them when there are more than
// max: clients without a token cannot hold more than max connections
// (and file descriptors) open, however slowly they send, while a new
// client is always accepted.
type gatedListener struct {
	net.Listener
	max int

	mu      sync.Mutex
	pending list.List // of *gatedConn, oldest first
}

// gate wraps l (see gatedListener).
func gate(l net.Listener, max int) *gatedListener {
	return &gatedListener{Listener: l, max: max}
}

// Accept accepts the next connection, closing the oldest pending one when
// there are too many.
func (l *gatedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	g := &gatedConn{Conn: c, l: l}
	var evict *gatedConn
	l.mu.Lock()
	g.elem = l.pending.PushBack(g)
	if l.pending.Len() > l.max {
		evict = l.pending.Remove(l.pending.Front()).(*gatedConn)
		evict.elem = nil
	}
	l.mu.Unlock()
	if evict != nil {
		_ = evict.Conn.Close()
	}
	return g, nil
}

// gatedConn is a connection of a gatedListener.
type gatedConn struct {
	net.Conn
	l    *gatedListener
	elem *list.Element // in l.pending while pending; guarded by l.mu
}

// authorized takes c out of the pending connections.
func (c *gatedConn) authorized() {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if c.elem != nil {
		c.l.pending.Remove(c.elem)
		c.elem = nil
	}
}

// Close closes the connection and forgets it.
func (c *gatedConn) Close() error {
	c.authorized()
	return c.Conn.Close()
}
