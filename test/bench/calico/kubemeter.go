package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/client-go/rest"
)

// meter is a plain-HTTP reverse proxy on loopback in front of the API
// server, one per side, so each side's requests are counted apart. It
// sends the admin's token upstream, so its clients need no credentials.
// It counts write requests (every method but GET) and the bytes of their
// bodies as the client sent them, read requests (GET, LIST), and keeps
// the path of each object a successful POST, PUT or PATCH wrote (a POST's
// from the name in its answer).
type meter struct {
	URL   string
	srv   *http.Server
	mu    sync.Mutex
	paths []string
	// writes, reads and sent are counted since the last take.
	writes, reads, sent atomic.Int64
}

// errUnmeasured means an ADD wrote an object the meter cannot name.
var errUnmeasured = errors.New("unmeasured write")

// countingReader counts the bytes read through it.
type countingReader struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func startMeter(cfg *rest.Config) (*meter, error) {
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, err
	}
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, err
	}
	if tlsCfg == nil {
		tlsCfg = &tls.Config{}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	m := &meter{URL: "http://" + l.Addr().String()}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	rp.Transport = &http.Transport{TLSClientConfig: tlsCfg, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 100}
	rp.ModifyResponse = m.record
	token := cfg.BearerToken
	m.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			m.reads.Add(1)
		} else {
			m.writes.Add(1)
			if r.Body != nil {
				r.Body = countingReader{ReadCloser: r.Body, n: &m.sent}
			}
		}
		r.Header.Set("Authorization", "Bearer "+token)
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = m.srv.Serve(l) }()
	return m, nil
}

// record keeps the path of the object a successful write stored.
func (m *meter) record(resp *http.Response) error {
	req := resp.Request
	if resp.StatusCode/100 != 2 {
		return nil
	}
	switch req.Method {
	case http.MethodPut, http.MethodPatch:
		m.keep(req.URL.Path)
	case http.MethodPost:
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			// Only the Calico side's Kubernetes Nodes, created before
			// any measured ADD, are sent as protobuf.
			m.keep(req.URL.Path + "/?")
			return nil
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return err
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		name, err := objectName(body, resp.Header.Get("Content-Encoding"))
		if err != nil {
			return fmt.Errorf("answer to POST %s: %w", req.URL.Path, err)
		}
		m.keep(req.URL.Path + "/" + name)
	}
	return nil
}

func (m *meter) keep(path string) {
	m.mu.Lock()
	m.paths = append(m.paths, path)
	m.mu.Unlock()
}

// objectName is metadata.name of a JSON object, gzipped or not.
func objectName(body []byte, encoding string) (string, error) {
	if encoding == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return "", err
		}
		if body, err = io.ReadAll(zr); err != nil {
			return "", err
		}
	}
	var obj struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &obj); err != nil {
		return "", err
	}
	if obj.Metadata.Name == "" {
		return "", fmt.Errorf("no metadata.name in %.100q", body)
	}
	return obj.Metadata.Name, nil
}

// traffic is what one side sent between two takes.
type traffic struct {
	writes, reads, sent int64
	paths               []string
}

// take returns the counters and paths since the last take.
func (m *meter) take() traffic {
	m.mu.Lock()
	p := m.paths
	m.paths = nil
	m.mu.Unlock()
	return traffic{writes: m.writes.Swap(0), reads: m.reads.Swap(0), sent: m.sent.Swap(0), paths: p}
}

func (m *meter) close() { _ = m.srv.Close() }

// restConfig is a client configuration reaching the API server through
// m, without client-side rate limits.
func (m *meter) restConfig() *rest.Config {
	return &rest.Config{Host: m.URL, QPS: 1000, Burst: 1000}
}

// writeKubeconfig writes a kubeconfig pointing at m into dir.
func (m *meter) writeKubeconfig(dir string) (string, error) {
	path := filepath.Join(dir, "kubeconfig")
	kc := strings.Join([]string{
		"apiVersion: v1",
		"kind: Config",
		"clusters: [{name: bench, cluster: {server: \"" + m.URL + "\"}}]",
		"users: [{name: bench, user: {}}]",
		"contexts: [{name: bench, context: {cluster: bench, user: bench}}]",
		"current-context: bench",
		"",
	}, "\n")
	return path, os.WriteFile(path, []byte(kc), 0o600)
}

// storedBytes GETs each object of paths through the admin's client and
// sums their sizes as the API server answers them (JSON, managedFields
// included): an object written twice counts twice, once per version
// stored.
func storedBytes(ctx context.Context, hc *http.Client, host string, paths []string) (int64, error) {
	var sum int64
	for _, p := range paths {
		if strings.HasSuffix(p, "/?") {
			return 0, fmt.Errorf("%w: an ADD created an object of %s in a form not JSON", errUnmeasured, strings.TrimSuffix(p, "/?"))
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, host+p, nil)
		if err != nil {
			return 0, err
		}
		req.Header.Set("Accept", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return 0, err
		}
		if resp.StatusCode == http.StatusNotFound {
			continue // written, then deleted by the same ADD
		}
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("GET %s: %s: %.200s", p, resp.Status, body)
		}
		sum += int64(len(body))
	}
	return sum, nil
}
