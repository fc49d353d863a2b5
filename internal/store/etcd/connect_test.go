package etcd_test

import (
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
)

// TestConnectEarly: the connection Connect dials is the one the first
// request uses: with new connections refused after it was made, the
// request still succeeds, and no second connection is made.
func TestConnectEarly(t *testing.T) {
	p := etcdtest.NewProxy(t, strings.TrimPrefix(server.Endpoint, "http://"))
	s := open(t, func(c *etcd.Config) {
		c.Endpoints = []string{p.Addr()}
		c.RequestTimeout = 2 * time.Second
	})
	defer s.Close()
	s.Connect(t.Context())
	p.WaitForwarded(t, 1)
	p.Refuse(true)
	if err := s.Txn(t.Context(), nil, []kv.Op{{Key: "a", Value: []byte("1")}}); err != nil {
		t.Fatalf("Txn on the early connection: %v", err)
	}
	if got, err := s.Get(t.Context(), "a"); err != nil || len(got) != 1 || string(got[0].Value) != "1" {
		t.Fatalf("Get = %v, %v", got, err)
	}
	if n := p.Forwarded(); n != 1 {
		t.Fatalf("%d connections, want the early one only", n)
	}
}

// TestConnectRefused: an early dial that is refused fails the first
// request as a refused dial does without it.
func TestConnectRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s := open(t, func(c *etcd.Config) {
		c.Endpoints = []string{addr}
		c.RequestTimeout = time.Second
	})
	defer s.Close()
	s.Connect(t.Context())
	_, err = s.Get(t.Context(), "a")
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Get from a refusing endpoint = %v, want ErrUnavailable", err)
	}
}

// TestConnectClosedUnused: Close closes an early connection no request
// took.
func TestConnectClosedUnused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := open(t, func(c *etcd.Config) { c.Endpoints = []string{l.Addr().String()} })
	s.Connect(t.Context())
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("read from the early connection after Close = %v, want it closed", err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestConnectHandshakesTLS: with https, Connect completes the TLS
// handshake too, before any request: a plugin process's first request
// under its node lock waits for neither the connection nor the
// handshake.
func TestConnectHandshakesTLS(t *testing.T) {
	p := newPKI(t, "early")
	cert, err := tls.LoadX509KeyPair(p.serverCert, p.serverKey)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := open(t, func(c *etcd.Config) {
		c.Endpoints = []string{"https://" + l.Addr().String()}
		c.CAFile = p.ca
	})
	defer s.Close()
	s.Connect(t.Context())
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc := c.(*tls.Conn)
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Fatalf("server side of the early connection's handshake: %v", err)
	}
	if got := tc.ConnectionState().NegotiatedProtocol; got != "h2" {
		t.Fatalf("negotiated %q, want h2", got)
	}
}
