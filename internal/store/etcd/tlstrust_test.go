//go:build unix

package etcd_test

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/filetrust"
	"github.com/ipkeeper/ipkeeper/internal/filetrust/filetrusttest"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
)

// tlsFiles are the TLS fields of the config, with the good file of each.
func tlsFiles(p *pki) []struct {
	key  string
	good string
	set  func(c *etcd.Config, path string)
} {
	return []struct {
		key  string
		good string
		set  func(c *etcd.Config, path string)
	}{
		{"caFile", p.ca, func(c *etcd.Config, path string) { c.CAFile = path }},
		{"certFile", p.clientCert, func(c *etcd.Config, path string) { c.CertFile = path }},
		{"keyFile", p.clientKey, func(c *etcd.Config, path string) { c.KeyFile = path }},
	}
}

// A TLS file another user could have written (or one in a directory or
// behind a link of another user's) is refused by Open with ErrConfig and
// filetrust.ErrUnsafe naming the file and the path that breaks the rule.
func TestTLSFilesUnsafe(t *testing.T) {
	p := newPKI(t, "trust")
	for _, f := range tlsFiles(p) {
		t.Run(f.key, func(t *testing.T) {
			filetrusttest.Run(t, filetrusttest.Unsafe(), func(t *testing.T, c filetrusttest.Case, base string) {
				data, err := os.ReadFile(f.good)
				if err != nil {
					t.Fatal(err)
				}
				path, names := c.Place(t, base, data)
				cfg := etcd.Config{Endpoints: []string{"https://127.0.0.1:1"}, CAFile: p.ca, CertFile: p.clientCert, KeyFile: p.clientKey}
				f.set(&cfg, path)
				s, err := etcd.Open(t.Context(), cfg)
				if err == nil {
					s.Close()
				}
				if !errors.Is(err, etcd.ErrConfig) || !errors.Is(err, filetrust.ErrUnsafe) ||
					!strings.Contains(err.Error(), f.key+" "+path) || !strings.Contains(err.Error(), names) {
					t.Fatalf("Open = %v, want ErrConfig and filetrust.ErrUnsafe naming %s %s and %s", err, f.key, path, names)
				}
				if strings.Contains(err.Error(), "BEGIN") {
					t.Fatalf("message shows file contents: %v", err)
				}
			})
		})
	}
}

// Each TLS file in each safe placement (root's link, the kubelet's ..data
// layout of a Secret volume, a sticky directory) is read, and the client
// writes to etcd over TLS with it.
func TestTLSFilesSafe(t *testing.T) {
	p := newPKI(t, "trust")
	srv := etcdtest.ForTest(t, &etcdtest.TLS{CertFile: p.serverCert, KeyFile: p.serverKey, CAFile: p.ca})
	for _, f := range tlsFiles(p) {
		t.Run(f.key, func(t *testing.T) {
			filetrusttest.Run(t, filetrusttest.Safe(), func(t *testing.T, c filetrusttest.Case, base string) {
				data, err := os.ReadFile(f.good)
				if err != nil {
					t.Fatal(err)
				}
				path, _ := c.Place(t, base, data)
				cfg := etcd.Config{Endpoints: []string{srv.Endpoint}, CAFile: p.ca, CertFile: p.clientCert, KeyFile: p.clientKey,
					Prefix: "/tlstrust", RequestTimeout: 5 * time.Second}
				f.set(&cfg, path)
				s, err := etcd.Open(t.Context(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				if err := s.Txn(t.Context(), nil, []kv.Op{{Key: "k", Value: []byte("v")}}); err != nil {
					t.Fatalf("Txn over TLS: %v", err)
				}
			})
		})
	}
}
