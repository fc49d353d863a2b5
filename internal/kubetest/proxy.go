package kubetest

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
)

// Proxy is an HTTPS front of a Server that a test can cut: clients
// configured by RESTConfig reach the API server through it (its current
// URL, so a Restart is followed). Refuse answers every request 503, Cut
// closes every connection (WATCHes included), and ExpireWatches answers
// the next WATCHes as the API server answers one from a resourceVersion
// its watch cache no longer holds (an ERROR event with a 410 Status).
type Proxy struct {
	srv  *httptest.Server
	s    *Server
	mu   sync.Mutex
	deny bool
	gone int
	// watches counts the WATCH requests passed to the API server.
	watches int
}

// NewProxy starts a proxy to s, closed when t ends.
func NewProxy(t testing.TB, s *Server) *Proxy {
	t.Helper()
	p := &Proxy{s: s}
	p.srv = httptest.NewTLSServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

// RESTConfig is a client configuration reaching the API server through
// the proxy with token.
func (p *Proxy) RESTConfig(token string) *rest.Config {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.srv.Certificate().Raw})
	return &rest.Config{Host: p.srv.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: ca}, QPS: 1000, Burst: 2000}
}

// AdminToken is the token of the Server's admin (system:masters).
func (s *Server) AdminToken() string { return s.Config.BearerToken }

// Refuse makes the proxy answer every request 503 (on) or pass them on.
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	p.deny = on
	p.mu.Unlock()
}

// Cut closes every connection to the proxy.
func (p *Proxy) Cut() { p.srv.CloseClientConnections() }

// ExpireWatches makes the next n WATCH requests fail as expired (410).
func (p *Proxy) ExpireWatches(n int) {
	p.mu.Lock()
	p.gone = n
	p.mu.Unlock()
}

// Watches returns how many WATCH requests reached the API server.
func (p *Proxy) Watches() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.watches
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	watch := r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1"
	p.mu.Lock()
	// A refused request never takes an expiry: the next WATCH that
	// reaches the proxy while it serves does.
	deny, gone := p.deny, watch && !p.deny && p.gone > 0
	if gone {
		p.gone--
	} else if watch && !deny {
		p.watches++
	}
	target := p.s.URL
	p.mu.Unlock()
	switch {
	case deny:
		http.Error(w, "kubetest proxy: refused", http.StatusServiceUnavailable)
		return
	case gone:
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",` +
			`"message":"too old resource version (kubetest proxy)","reason":"Expired","code":410}}` + "\n"))
		return
	}
	u, err := url.Parse(target)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(p.s.pki.caPEM)
	rp := &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.Out.Host = u.Host },
		FlushInterval: -1,
		ErrorLog:      log.New(io.Discard, "", 0), // cuts are the point
		Transport:     &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}},
	}
	rp.ServeHTTP(w, r)
}
