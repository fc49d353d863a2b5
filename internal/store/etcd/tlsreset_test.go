package etcd_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
)

// A server that refuses the client's certificate may reset the connection
// before its alert reaches the client, after the client sent its request:
// the request then looks sent and unanswered. When every attempt within
// the request timeout broke that way and the server's alert arrives only
// afterwards, the write is still reported as the TLS failure it is, not
// as "outcome unknown" (the server never served a connection carrying
// those credentials).
func TestTLSRefusalAfterResets(t *testing.T) {
	good, other := newPKI(t, "good"), newPKI(t, "other")
	serverCert, err := tls.LoadX509KeyPair(good.serverCert, good.serverKey)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(good.ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	const timeout = time.Second
	// Until resetUntil the server takes any certificate, reads the
	// request and resets the connection; then it verifies certificates,
	// refusing the client's with an alert.
	resetting := &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientAuth: tls.RequireAnyClientCert, NextProtos: []string{"h2"}}
	verifying := &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool, NextProtos: []string{"h2"}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	var mu sync.Mutex
	var resetUntil time.Time
	var resets int
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if resetUntil.IsZero() {
				resetUntil = time.Now().Add(timeout + 300*time.Millisecond)
			}
			reset := time.Now().Before(resetUntil)
			if reset {
				resets++
			}
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if !reset {
					tls.Server(c, verifying).Handshake() // sends the alert
					return
				}
				tc := tls.Server(c, resetting)
				if tc.Handshake() != nil {
					return
				}
				buf := make([]byte, 4096)
				tc.Read(buf) // the client's preface and request
				c.(*net.TCPConn).SetLinger(0)
			})
		}
	})

	s, err := etcd.Open(t.Context(), etcd.Config{Endpoints: []string{"https://" + ln.Addr().String()}, CAFile: good.ca,
		CertFile: other.clientCert, KeyFile: other.clientKey, RequestTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Txn(t.Context(), nil, []kv.Op{{Key: "k", Value: []byte("v")}})
	mu.Lock()
	t.Logf("%d connections reset before the refusal; Txn: %v", resets, err)
	mu.Unlock()
	if !errors.Is(err, etcd.ErrTLS) || errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Txn: %v; want the TLS failure alone, not %v", err, store.ErrUnavailable)
	}
}
