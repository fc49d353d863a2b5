package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// meterProxy is a reverse proxy in front of the API server that counts
// what passes through it: requests by verb and resource, and the bytes of
// request and response bodies as they cross the wire (a response the API
// server gzips is counted gzipped, as its client receives it). Giving one
// client a kubeconfig that points here attributes its traffic to it
// exactly, watch streams included (counted as their events arrive).
type meterProxy struct {
	URL string
	// CAPEM is the proxy's own self-signed serving certificate: client-go
	// sends a bearer token only over TLS.
	CAPEM []byte

	srv   *http.Server
	mu    sync.Mutex
	kinds map[string]*kindCounter
}

// kindCounter counts the requests of one kind and their bytes.
type kindCounter struct {
	requests atomic.Int64
	bytesIn  atomic.Int64 // request bodies, client to API server
	bytesOut atomic.Int64 // response bodies, API server to client
}

// traffic is a snapshot of a meterProxy's counters: in total, and by
// kind (requests, and the bytes both ways).
type traffic struct {
	bytesIn, bytesOut int64
	byKind            map[string]int64
	bytesByKind       map[string]int64
}

// startProxy listens on a loopback port and forwards to the API server at
// target, trusting the CA in caFile.
func startProxy(target, caFile string) (*meterProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	cert, certPEM, err := selfSigned()
	if err != nil {
		return nil, err
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		return nil, err
	}
	p := &meterProxy{URL: "https://" + l.Addr().String(), CAPEM: certPEM, kinds: map[string]*kindCounter{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1 // watch events pass at once
	rp.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true,
		MaxIdleConnsPerHost: 100}
	rp.ModifyResponse = func(resp *http.Response) error {
		if k, ok := resp.Request.Context().Value(kindKey{}).(*kindCounter); ok {
			resp.Body = &countingBody{ReadCloser: resp.Body, n: &k.bytesOut}
		}
		return nil
	}
	p.srv = &http.Server{Protocols: protocols(), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := p.count(requestKind(r.Method, r.URL.Path, r.URL.Query().Get("watch")))
		if r.Body != nil {
			r.Body = &countingBody{ReadCloser: r.Body, n: &k.bytesIn}
		}
		rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), kindKey{}, k)))
	})}
	go func() { _ = p.srv.Serve(l) }()
	return p, nil
}

// kindKey carries a request's kindCounter to its response.
type kindKey struct{}

// count counts a request of kind and returns its kind's counter.
func (p *meterProxy) count(kind string) *kindCounter {
	p.mu.Lock()
	defer p.mu.Unlock()
	k, ok := p.kinds[kind]
	if !ok {
		k = &kindCounter{}
		p.kinds[kind] = k
	}
	k.requests.Add(1)
	return k
}

// snapshot returns the counters now.
func (p *meterProxy) snapshot() traffic {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := traffic{byKind: make(map[string]int64, len(p.kinds)), bytesByKind: make(map[string]int64, len(p.kinds))}
	for name, k := range p.kinds {
		in, out := k.bytesIn.Load(), k.bytesOut.Load()
		t.bytesIn += in
		t.bytesOut += out
		t.byKind[name] = k.requests.Load()
		t.bytesByKind[name] = in + out
	}
	return t
}

func (p *meterProxy) close() { _ = p.srv.Close() }

// sub is the traffic between o and t.
func (t traffic) sub(o traffic) traffic {
	d := traffic{bytesIn: t.bytesIn - o.bytesIn, bytesOut: t.bytesOut - o.bytesOut, byKind: map[string]int64{}, bytesByKind: map[string]int64{}}
	for k, v := range t.byKind {
		if v -= o.byKind[k]; v != 0 {
			d.byKind[k] = v
		}
	}
	// A watch opened before o carries bytes but no request after it.
	for k, v := range t.bytesByKind {
		if v -= o.bytesByKind[k]; v != 0 {
			d.bytesByKind[k] = v
		}
	}
	return d
}

// requests is the number of requests in t.
func (t traffic) requests() int64 {
	var n int64
	for _, v := range t.byKind {
		n += v
	}
	return n
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// requestKind names a request to the API by verb and resource, as
// apiserver_request_total does: "LIST pods", "WATCH ipamnodes",
// "GET ipamnodes", "PUT ipamnodes". A GET of a collection is a LIST (a
// WATCH with watch=true); the resource is the path element after the
// version, or after namespaces/NS; subresources are appended ("pods/status").
func requestKind(method, path, watch string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var rest []string
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		rest = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		rest = parts[3:]
	default:
		return method + " " + path
	}
	if len(rest) >= 2 && rest[0] == "namespaces" && len(rest) != 2 {
		rest = rest[2:]
	}
	if len(rest) == 0 {
		return method + " " + path
	}
	res := rest[0]
	named := len(rest) >= 2
	if len(rest) >= 3 {
		res += "/" + rest[2]
	}
	verb := method
	if method == http.MethodGet {
		switch {
		case watch == "true" || watch == "1":
			verb = "WATCH"
		case !named:
			verb = "LIST"
		}
	}
	return verb + " " + res
}

// proxiedKubeconfig rewrites the kubeconfig at src into dst with every
// cluster's server set to the proxy (the token passes through unchanged,
// so the API server authenticates and authorizes the same user).
func (p *meterProxy) proxiedKubeconfig(src, dst string) error {
	c, err := clientcmd.LoadFromFile(src)
	if err != nil {
		return err
	}
	p.point(c)
	return clientcmd.WriteToFile(*c, dst)
}

// point makes every cluster of c the proxy.
func (p *meterProxy) point(c *clientcmdapi.Config) {
	for _, cl := range c.Clusters {
		cl.Server = p.URL
		cl.CertificateAuthorityData = p.CAPEM
		cl.CertificateAuthority = ""
	}
}

func protocols() *http.Protocols {
	var ps http.Protocols
	ps.SetHTTP1(true)
	ps.SetHTTP2(true)
	return &ps
}

// selfSigned makes a certificate for 127.0.0.1, valid for a day.
func selfSigned() (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "scale-bench proxy"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, certPEM, nil
}
