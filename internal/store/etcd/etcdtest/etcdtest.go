// Package etcdtest starts a real, embedded etcd server on loopback ports for
// tests and benchmarks. It links the etcd server, so only test binaries and
// benchmark programs import it; the plugin never does.
package etcdtest

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
)

// TLS asks for a client listener with TLS and client-certificate auth.
type TLS struct {
	// CertFile and KeyFile are the server's certificate and key; CAFile
	// is the CA that signs accepted client certificates.
	CertFile, KeyFile, CAFile string
}

// Server is a running embedded etcd.
type Server struct {
	// Endpoint is the client URL (http:// or https://).
	Endpoint string
	// Dir is the server's data directory.
	Dir  string
	etcd *embed.Etcd
	done bool
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Options are what a server may be started with beyond the defaults.
type Options struct {
	// TLS, when set, makes the client listener TLS.
	TLS *TLS
	// QuotaBackendBytes, when positive, replaces etcd's database quota
	// (2 GiB).
	QuotaBackendBytes int64
}

// Start starts a single-member etcd in dir (a fresh directory is made
// under os.TempDir when dir is ""), with an optional TLS client listener.
// It returns once the server serves requests.
func Start(dir string, tlsc *TLS) (*Server, error) {
	return StartWith(dir, Options{TLS: tlsc})
}

// StartWith is Start with options.
func StartWith(dir string, o Options) (*Server, error) {
	if dir == "" {
		d, err := os.MkdirTemp("", "etcdtest-")
		if err != nil {
			return nil, err
		}
		dir = d
	}
	var lastErr error
	for range 5 { // a port picked free may be taken by the time etcd binds it
		s, err := start(dir, o)
		if err == nil {
			return s, nil
		}
		lastErr = err
		_ = os.RemoveAll(filepath.Join(dir, "member"))
	}
	return nil, lastErr
}

func start(dir string, o Options) (*Server, error) {
	tlsc := o.TLS
	cport, err := FreePort()
	if err != nil {
		return nil, err
	}
	pport, err := FreePort()
	if err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = "etcdtest"
	cfg.Dir = dir
	cfg.LogLevel = "fatal"
	if o.QuotaBackendBytes > 0 {
		cfg.QuotaBackendBytes = o.QuotaBackendBytes
	}
	scheme := "http"
	if tlsc != nil {
		scheme = "https"
		cfg.ClientTLSInfo = transport.TLSInfo{CertFile: tlsc.CertFile, KeyFile: tlsc.KeyFile,
			TrustedCAFile: tlsc.CAFile, ClientCertAuth: true}
	}
	cu, _ := url.Parse(fmt.Sprintf("%s://127.0.0.1:%d", scheme, cport))
	pu, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", pport))
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(20 * time.Second):
		e.Close()
		return nil, fmt.Errorf("etcdtest: server not ready after 20s")
	case err := <-e.Err():
		e.Close()
		return nil, err
	}
	return &Server{Endpoint: cu.String(), Dir: dir, etcd: e}, nil
}

// Close stops the server once (further calls do nothing) and removes its
// data directory.
func (s *Server) Close() {
	if s == nil || s.done {
		return
	}
	s.done = true
	s.etcd.Close()
	_ = os.RemoveAll(s.Dir)
}

// Shared starts one server for a test binary: call it from TestMain, run
// the tests, then call the returned stop. It exits the process when the
// server cannot start.
func Shared() (*Server, func()) {
	s, err := Start("", nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdtest: start embedded etcd:", err)
		os.Exit(2)
	}
	return s, s.Close
}

// ForTest starts a server for one test and closes it in t.Cleanup.
func ForTest(t testing.TB, tlsc *TLS) *Server {
	t.Helper()
	s, err := Start(t.TempDir(), tlsc)
	if err != nil {
		t.Fatalf("start embedded etcd: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}
