package main

import (
	"bytes"
	"compress/gzip"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// An upstream standing in for the API server: it answers a POST with the
// object named in its body (gzipped when asked by ?gzip), a PUT of
// .../conflict with 409, and everything else with {}; it refuses requests
// without the admin's token.
func fakeAPIServer(t *testing.T) *rest.Config {
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer admin-token" {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost && r.URL.Query().Has("gzip"):
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			_, _ = zw.Write(body)
			_ = zw.Close()
		case r.Method == http.MethodPost:
			_, _ = w.Write(body)
		case strings.HasSuffix(r.URL.Path, "/conflict"):
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{}`))
		default:
			_, _ = w.Write([]byte(`{}`))
		}
	}))
	t.Cleanup(ts.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
	return &rest.Config{Host: ts.URL, BearerToken: "admin-token", TLSClientConfig: rest.TLSClientConfig{CAData: ca}}
}

func TestMeterCountsWritesAndKeepsWrittenObjects(t *testing.T) {
	m, err := startMeter(fakeAPIServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	do := func(method, path, body string) {
		t.Helper()
		req, err := http.NewRequest(method, m.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized {
			t.Fatalf("%s %s: the meter did not send the admin's token", method, path)
		}
	}
	do(http.MethodGet, "/apis/g/v1/blocks", "")
	do(http.MethodPost, "/apis/g/v1/handles", `{"metadata":{"name":"h1"}}`)
	do(http.MethodPost, "/apis/g/v1/handles?gzip=1", `{"metadata":{"name":"h2"}}`)
	do(http.MethodPatch, "/apis/g/v1/blocks/b1", `[{"op":"add"}]`)
	do(http.MethodPut, "/apis/g/v1/blocks/conflict", `{"x":1}`)
	do(http.MethodDelete, "/apis/g/v1/handles/h0", "")

	got := m.take()
	want := []string{"/apis/g/v1/handles/h1", "/apis/g/v1/handles/h2", "/apis/g/v1/blocks/b1"}
	if !slices.Equal(got.paths, want) {
		t.Errorf("paths %q, want %q (a refused PUT or a DELETE stores nothing)", got.paths, want)
	}
	sent := int64(len(`{"metadata":{"name":"h1"}}`)*2 + len(`[{"op":"add"}]`) + len(`{"x":1}`))
	if got.writes != 5 || got.reads != 1 || got.sent != sent {
		t.Errorf("writes %d reads %d sent %d, want 5, 1, %d", got.writes, got.reads, got.sent, sent)
	}
	if again := m.take(); again.writes != 0 || again.sent != 0 || len(again.paths) != 0 {
		t.Errorf("a second take returned %+v, want nothing", again)
	}
}

func TestObjectName(t *testing.T) {
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	_, _ = zw.Write([]byte(`{"metadata":{"name":"b"}}`))
	_ = zw.Close()
	if n, err := objectName(z.Bytes(), "gzip"); err != nil || n != "b" {
		t.Errorf("gzipped: %q, %v", n, err)
	}
	for _, body := range []string{`{"metadata":{}}`, `not json`} {
		if n, err := objectName([]byte(body), ""); err == nil {
			t.Errorf("objectName(%q) = %q, want an error", body, n)
		}
	}
}

func TestParseDensities(t *testing.T) {
	got, err := parseDensities("10, 100,2000")
	if err != nil || !slices.Equal(got, []int{10, 100, 2000}) {
		t.Fatalf("parseDensities = %v, %v", got, err)
	}
	for _, bad := range []string{"", "10,10", "100,10", "0", "x"} {
		if got, err := parseDensities(bad); err == nil {
			t.Errorf("parseDensities(%q) = %v, want an error", bad, got)
		}
	}
}
