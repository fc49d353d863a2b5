package etcd_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
)

// pki is a CA with a server and a client certificate, written as PEM files.
type pki struct {
	dir                       string
	ca, serverCert, serverKey string
	clientCert, clientKey     string
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// newPKI makes a CA and a server and a client certificate signed by it.
func newPKI(t *testing.T, name string) *pki {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name + " CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	p := &pki{dir: dir, ca: filepath.Join(dir, "ca.pem")}
	writePEM(t, p.ca, "CERTIFICATE", caDER)
	issue := func(cn string, serial int64, usage ...x509.ExtKeyUsage) (string, string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage,
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		cert, keyPath := filepath.Join(dir, cn+".pem"), filepath.Join(dir, cn+"-key.pem")
		writePEM(t, cert, "CERTIFICATE", der)
		writePEM(t, keyPath, "EC PRIVATE KEY", kder)
		return cert, keyPath
	}
	p.serverCert, p.serverKey = issue("server", 2, x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = issue("client", 3, x509.ExtKeyUsageClientAuth)
	return p
}

func TestTLS(t *testing.T) {
	good := newPKI(t, "good")
	other := newPKI(t, "other")
	srv := etcdtest.ForTest(t, &etcdtest.TLS{CertFile: good.serverCert, KeyFile: good.serverKey, CAFile: good.ca})
	hostPort := strings.TrimPrefix(srv.Endpoint, "https://")
	for _, tc := range []tlsCase{
		{name: "client cert", cfg: etcd.Config{Endpoints: []string{srv.Endpoint}, CAFile: good.ca, CertFile: good.clientCert, KeyFile: good.clientKey}},
		{name: "host:port becomes https", cfg: etcd.Config{Endpoints: []string{hostPort}, CAFile: good.ca, CertFile: good.clientCert, KeyFile: good.clientKey}},
		{name: "wrong CA", cfg: etcd.Config{Endpoints: []string{srv.Endpoint}, CAFile: other.ca, CertFile: good.clientCert, KeyFile: good.clientKey},
			wantErr: etcd.ErrTLS, wantInMsg: "caFile"},
		{name: "client cert from another CA", cfg: etcd.Config{Endpoints: []string{srv.Endpoint}, CAFile: good.ca, CertFile: other.clientCert, KeyFile: other.clientKey},
			wantErr: etcd.ErrTLS, wantInMsg: "certFile"},
		{name: "no client cert", cfg: etcd.Config{Endpoints: []string{srv.Endpoint}, CAFile: good.ca},
			wantErr: etcd.ErrTLS, wantInMsg: "certFile"},
		{name: "http to a TLS server", cfg: etcd.Config{Endpoints: []string{"http://" + hostPort}},
			wantErr: store.ErrUnavailable},
	} {
		// Each case also with the connection dialed early (Connect), as
		// a plugin process dials while it waits for its node lock.
		for _, early := range []bool{false, true} {
			name := tc.name
			if early {
				name += " connected early"
			}
			t.Run(name, func(t *testing.T) { tc.run(t, early) })
		}
	}
}

// tlsCase is a TestTLS case: a client configuration and the error its
// first request meets (none, or wantErr with wantInMsg in its message).
type tlsCase struct {
	name      string
	cfg       etcd.Config
	wantErr   error
	wantInMsg string
}

func (tc tlsCase) run(t *testing.T, early bool) {
	tc.cfg.Prefix = "/tls"
	tc.cfg.RequestTimeout = 2 * time.Second
	s, err := etcd.Open(t.Context(), tc.cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	if early {
		s.Connect(t.Context())
	}
	err = s.Txn(t.Context(), nil, []kv.Op{{Key: "k", Value: []byte("v")}})
	if tc.wantErr == nil {
		if err != nil {
			t.Fatalf("Txn: %v", err)
		}
		return
	}
	if !errors.Is(err, tc.wantErr) {
		t.Fatalf("Txn: %v, want %v", err, tc.wantErr)
	}
	// Not retried until the request timeout: a TLS failure is
	// permanent, not "unavailable".
	if tc.wantErr == etcd.ErrTLS && (errors.Is(err, store.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)) {
		t.Errorf("a TLS failure was retried as unavailable: %v", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, tc.wantInMsg) {
		t.Errorf("message %q does not mention %q", msg, tc.wantInMsg)
	}
	if strings.Contains(msg, "PRIVATE KEY") || strings.Contains(msg, "BEGIN") {
		t.Errorf("message leaks key material: %q", msg)
	}
	t.Logf("%s", msg)
}

// Bad TLS files are reported at Open, naming the file, never its contents.
func TestTLSFiles(t *testing.T) {
	p := newPKI(t, "files")
	junk := filepath.Join(p.dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("-----BEGIN EC PRIVATE KEY-----\nc2VjcmV0\n-----END EC PRIVATE KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  etcd.Config
		want string
	}{
		{"missing CA", etcd.Config{CAFile: filepath.Join(p.dir, "nope.pem")}, "caFile"},
		{"CA without PEM", etcd.Config{CAFile: p.clientKey}, "caFile"},
		{"key does not match", etcd.Config{CertFile: p.clientCert, KeyFile: junk}, "keyFile"},
		{"cert without key", etcd.Config{CertFile: p.clientCert}, "together"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Endpoints = []string{"https://127.0.0.1:1"}
			_, err := etcd.Open(t.Context(), tc.cfg)
			if !errors.Is(err, etcd.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open: %v, want ErrConfig naming %s", err, tc.want)
			}
			if strings.Contains(err.Error(), "c2VjcmV0") || strings.Contains(err.Error(), "BEGIN") {
				t.Fatalf("error leaks file contents: %v", err)
			}
		})
	}
}
