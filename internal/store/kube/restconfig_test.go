//go:build unix

package kube

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/ipkeeper/ipkeeper/internal/filetrust"
	"github.com/ipkeeper/ipkeeper/internal/filetrust/filetrusttest"
)

// testPKI is a CA, a server certificate for 127.0.0.1 and a client
// certificate, PEM-encoded.
type testPKI struct {
	ca, clientCert, clientKey []byte
	server                    tls.Certificate
	pool                      *x509.CertPool
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, tmpl *x509.Certificate) (certPEM, keyPEM []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = big.NewInt(serial), time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	}
	p := &testPKI{ca: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), pool: x509.NewCertPool()}
	p.pool.AddCert(caCert)
	sc, sk := leaf(2, &x509.Certificate{Subject: pkix.Name{CommonName: "server"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	if p.server, err = tls.X509KeyPair(sc, sk); err != nil {
		t.Fatal(err)
	}
	p.clientCert, p.clientKey = leaf(3, &x509.Certificate{Subject: pkix.Name{CommonName: "client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return p
}

// tokenServer is an HTTPS server on loopback that answers 200 to a
// request with the client certificate (when required) and the bearer
// token it wants, 401 otherwise; it records every token it was sent and
// counts connections.
type tokenServer struct {
	*httptest.Server
	mu     sync.Mutex
	want   string
	tokens []string
	conns  int
}

func startTokenServer(t *testing.T, p *testPKI, want string, clientCert bool) *tokenServer {
	t.Helper()
	s := &tokenServer{want: want}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		s.mu.Lock()
		s.tokens = append(s.tokens, tok)
		ok := tok == s.want
		s.mu.Unlock()
		if !ok || clientCert && len(r.TLS.PeerCertificates) == 0 {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte(`{}`))
	}))
	s.TLS = &tls.Config{Certificates: []tls.Certificate{p.server}, ClientCAs: p.pool, ClientAuth: tls.VerifyClientCertIfGiven}
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.mu.Lock()
			s.conns++
			s.mu.Unlock()
		}
	}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

func (s *tokenServer) setWant(tok string) {
	s.mu.Lock()
	s.want = tok
	s.mu.Unlock()
}

func (s *tokenServer) seen() ([]string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.tokens), s.conns
}

// get sends one GET with rc and returns the status code.
func get(t *testing.T, rc *rest.Config) int {
	t.Helper()
	code, err := try(rc)
	if err != nil {
		t.Fatal(err)
	}
	return code
}

func try(rc *rest.Config) (int, error) {
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return 0, err
	}
	resp, err := hc.Get(rc.Host + "/version")
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// credentialFiles are the files a kubeconfig names, by their kubeconfig
// key, and the kubeconfig itself ("kubeconfig").
var credentialFiles = []string{"kubeconfig", "certificate-authority", "client-certificate", "client-key", "tokenFile"}

// placeKubeconfig writes a kubeconfig for server that names a CA file, a
// client certificate and key and a token file, all in base (mode 0600)
// but the one named target, which place puts where it wants; it returns
// the kubeconfig's path and the target's.
func placeKubeconfig(t *testing.T, base, server string, p *testPKI, target string,
	place func(t testing.TB, base string, data []byte) (string, string)) (kubeconfig, targetPath string) {
	t.Helper()
	content := map[string][]byte{"certificate-authority": p.ca, "client-certificate": p.clientCert,
		"client-key": p.clientKey, "tokenFile": []byte("the-token\n")}
	paths := map[string]string{}
	for _, k := range credentialFiles[1:] {
		if k == target {
			sub := filepath.Join(base, "placed")
			if err := os.Mkdir(sub, 0o700); err != nil {
				t.Fatal(err)
			}
			paths[k], targetPath = place(t, sub, content[k])
			continue
		}
		paths[k] = filepath.Join(base, k)
		if err := os.WriteFile(paths[k], content[k], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	kc := "apiVersion: v1\nkind: Config\ncurrent-context: x\n" +
		"clusters: [{name: c, cluster: {server: '" + server + "', certificate-authority: '" + paths["certificate-authority"] + "'}}]\n" +
		"users: [{name: u, user: {client-certificate: '" + paths["client-certificate"] + "', client-key: '" + paths["client-key"] +
		"', tokenFile: '" + paths["tokenFile"] + "'}}]\n" +
		"contexts: [{name: x, context: {cluster: c, user: u}}]\n"
	if target == "kubeconfig" {
		sub := filepath.Join(base, "placed")
		if err := os.Mkdir(sub, 0o700); err != nil {
			t.Fatal(err)
		}
		kubeconfig, targetPath = place(t, sub, []byte(kc))
		return kubeconfig, targetPath
	}
	kubeconfig = filepath.Join(base, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubeconfig, targetPath
}

// A kubeconfig, or a file it names, that another user could have written
// is refused by RESTConfig and Open with ErrBadConfig and
// filetrust.ErrUnsafe naming the file and the path that breaks the rule;
// nothing connects to the server the kubeconfig names.
func TestRESTConfigRefusesUnsafeFiles(t *testing.T) {
	p := newTestPKI(t)
	srv := startTokenServer(t, p, "the-token", true)
	for _, target := range credentialFiles {
		t.Run(target, func(t *testing.T) {
			filetrusttest.Run(t, filetrusttest.Unsafe(), func(t *testing.T, c filetrusttest.Case, base string) {
				kc, names := placeKubeconfig(t, base, srv.URL, p, target, c.Place)
				_, err := RESTConfig(kc)
				if !errors.Is(err, ErrBadConfig) || !errors.Is(err, filetrust.ErrUnsafe) || !strings.Contains(err.Error(), names) {
					t.Fatalf("RESTConfig = %v, want ErrBadConfig and filetrust.ErrUnsafe naming %s", err, names)
				}
				if target != "kubeconfig" && !strings.Contains(err.Error(), target) {
					t.Fatalf("RESTConfig = %v, want it to say %s", err, target)
				}
				if _, err2 := Open(Config{Kubeconfig: kc}); err2 == nil || err2.Error() != err.Error() {
					t.Fatalf("Open = %v, want %v", err2, err)
				}
				if strings.Contains(err.Error(), "the-token") || strings.Contains(err.Error(), "PRIVATE") {
					t.Fatalf("message shows a credential: %v", err)
				}
			})
		})
	}
	if tokens, conns := srv.seen(); conns != 0 || len(tokens) != 0 {
		t.Fatalf("refused kubeconfigs connected %d times, sent %q", conns, tokens)
	}
}

// Every safe placement of each file (a root-owned link, the kubelet's
// ..data layout, a sticky directory) is read, and the configuration
// reaches the server with the CA, the client certificate and the token of
// the files.
func TestRESTConfigAcceptsSafeFiles(t *testing.T) {
	p := newTestPKI(t)
	srv := startTokenServer(t, p, "the-token", true)
	for _, target := range credentialFiles {
		t.Run(target, func(t *testing.T) {
			filetrusttest.Run(t, filetrusttest.Safe(), func(t *testing.T, c filetrusttest.Case, base string) {
				kc, _ := placeKubeconfig(t, base, srv.URL, p, target, c.Place)
				rc, err := RESTConfig(kc)
				if err != nil {
					t.Fatal(err)
				}
				if rc.CAFile != "" || rc.CertFile != "" || rc.KeyFile != "" || rc.BearerTokenFile != "" || rc.BearerToken != "" {
					t.Fatalf("client-go is left a file to read or a fixed token: %+v", rc.TLSClientConfig)
				}
				if code := get(t, rc); code != http.StatusOK {
					t.Fatalf("GET with the kubeconfig's credentials: %d", code)
				}
			})
		})
	}
}

var b64 = base64.StdEncoding.EncodeToString

// Relative paths are relative to the kubeconfig's directory, and a
// *-data field wins over its file, which is then not read (an unsafe file
// there does not matter).
func TestRESTConfigRelativeAndData(t *testing.T) {
	p := newTestPKI(t)
	srv := startTokenServer(t, p, "tok", false)
	base := t.TempDir()
	for name, data := range map[string][]byte{"ca.crt": p.ca, "token": []byte("tok"), "open.crt": p.ca} {
		if err := os.WriteFile(filepath.Join(base, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(base, "open.crt"), 0o666); err != nil {
		t.Fatal(err)
	}
	write := func(cluster string) string {
		kc := filepath.Join(base, "kc")
		if err := os.WriteFile(kc, []byte("current-context: x\nclusters: [{name: c, cluster: {server: '"+srv.URL+"', "+cluster+"}}]\n"+
			"users: [{name: u, user: {tokenFile: token}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return kc
	}
	for _, cluster := range []string{"certificate-authority: ca.crt",
		"certificate-authority: open.crt, certificate-authority-data: " + b64(p.ca)} {
		rc, err := RESTConfig(write(cluster))
		if err != nil {
			t.Fatalf("%s: %v", cluster, err)
		}
		if code := get(t, rc); code != http.StatusOK {
			t.Fatalf("%s: GET: %d", cluster, code)
		}
	}
	if _, err := RESTConfig(write("certificate-authority: open.crt")); !errors.Is(err, filetrust.ErrUnsafe) {
		t.Fatalf("a CA file open to writers: %v", err)
	}
}

// The in-cluster configuration reads the ServiceAccount volume as the
// kubelet lays it out (a sticky 1777 tmpfs, root's ..data links): it
// passes, and a rotated token is used after the server refuses the old
// one. A rotation whose ..data points into a directory another user owns
// is not believed: the token read before is sent until the server refuses
// it, then requests fail naming the unsafe directory, and the planted token
// is never sent.
func TestRESTConfigInCluster(t *testing.T) {
	p := newTestPKI(t)
	srv := startTokenServer(t, p, "token-1", false)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", u.Hostname())
	t.Setenv("KUBERNETES_SERVICE_PORT", u.Port())
	base := t.TempDir()
	if err := os.Chmod(base, 0o700); err != nil {
		t.Fatal(err)
	}
	vol := filetrusttest.KubeletVolume(t, base, map[string][]byte{"token": []byte("token-1\n"), "ca.crt": p.ca})
	old := inClusterDir
	inClusterDir = vol
	t.Cleanup(func() { inClusterDir = old })

	rc, err := RESTConfig("")
	if err != nil {
		t.Fatal(err)
	}
	if code := get(t, rc); code != http.StatusOK {
		t.Fatalf("GET in-cluster: %d", code)
	}
	filetrusttest.KubeletUpdate(t, vol, "..2026_11_27_14_00_00.000000002", map[string][]byte{"token": []byte("token-2\n"), "ca.crt": p.ca})
	srv.setWant("token-2")
	if code := get(t, rc); code != http.StatusUnauthorized { // the cached token-1, refused
		t.Fatalf("first GET after the rotation: %d, want 401", code)
	}
	if code := get(t, rc); code != http.StatusOK {
		t.Fatalf("GET after the 401: %d, want the rotated token accepted", code)
	}

	if os.Geteuid() == 0 {
		ts := filetrusttest.KubeletUpdate(t, vol, "..2026_11_27_15_00_00.000000003", map[string][]byte{"token": []byte("planted\n"), "ca.crt": p.ca})
		if err := os.Chown(ts, filetrusttest.Nobody, filetrusttest.Nobody); err != nil {
			t.Fatal(err)
		}
		srv.setWant("planted")
		if code := get(t, rc); code != http.StatusUnauthorized {
			t.Fatalf("GET after a planted rotation: %d, want 401 (token-2 kept)", code)
		}
		for range 2 {
			if code, err := try(rc); !errors.Is(err, filetrust.ErrUnsafe) || !strings.Contains(err.Error(), ts) {
				t.Fatalf("GET after the 401: %d, %v; want an error naming %s", code, err, ts)
			}
		}
		if tokens, _ := srv.seen(); slices.Contains(tokens, "planted") {
			t.Fatalf("the planted token was sent: %q", tokens)
		}
		if _, err := RESTConfig(""); !errors.Is(err, filetrust.ErrUnsafe) || !strings.Contains(err.Error(), ts) {
			t.Fatalf("RESTConfig with a planted ..data: %v, want filetrust.ErrUnsafe naming %s", err, ts)
		}
	}
}

// The in-cluster token or CA placed unsafely is refused; outside a pod
// the error is rest.ErrNotInCluster.
func TestRESTConfigInClusterRefusesUnsafe(t *testing.T) {
	p := newTestPKI(t)
	t.Setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "1")
	old := inClusterDir
	t.Cleanup(func() { inClusterDir = old })
	for _, name := range []string{"token", "ca.crt"} {
		t.Run(name, func(t *testing.T) {
			filetrusttest.Run(t, filetrusttest.Unsafe(), func(t *testing.T, c filetrusttest.Case, base string) {
				files := map[string][]byte{"token": []byte("tok"), "ca.crt": p.ca}
				path, names := c.Place(t, base, files[name])
				vol := filepath.Join(base, "vol")
				if err := os.Mkdir(vol, 0o700); err != nil {
					t.Fatal(err)
				}
				for n, data := range files {
					if n != name {
						if err := os.WriteFile(filepath.Join(vol, n), data, 0o600); err != nil {
							t.Fatal(err)
						}
					}
				}
				if err := os.Symlink(path, filepath.Join(vol, name)); err != nil {
					t.Fatal(err)
				}
				inClusterDir = vol
				_, err := RESTConfig("")
				if !errors.Is(err, ErrBadConfig) || !errors.Is(err, filetrust.ErrUnsafe) || !strings.Contains(err.Error(), names) {
					t.Fatalf("RESTConfig(\"\") = %v, want ErrBadConfig and filetrust.ErrUnsafe naming %s", err, names)
				}
			})
		})
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := RESTConfig(""); !errors.Is(err, rest.ErrNotInCluster) || !errors.Is(err, ErrBadConfig) {
		t.Fatalf("outside a pod: %v", err)
	}
}
