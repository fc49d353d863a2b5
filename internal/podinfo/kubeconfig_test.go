package podinfo

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testCert returns a self-signed certificate and its key, PEM-encoded.
func testCert(t testing.TB) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Unix(0, 0), NotAfter: time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func write(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const kubeconfigTmpl = `apiVersion: v1
kind: Config
current-context: ctx
clusters:
- name: c
  cluster:
    server: SERVER
CLUSTER
users:
- name: u
  user:
USER
contexts:
- name: other
  context: {cluster: nope, user: nope}
- name: ctx
  context:
    cluster: c
    user: u
`

func kubeconfigYAML(server, cluster, user string) string {
	r := strings.NewReplacer("SERVER", server, "CLUSTER", cluster, "USER", user)
	return r.Replace(kubeconfigTmpl)
}

// TestLoadKubeconfig reads the forms kubeconfigs come in: CA and client
// certificate inline or as files (relative to the kubeconfig), tokens
// inline or in a file, the installer's own format.
func TestLoadKubeconfig(t *testing.T) {
	dir := t.TempDir()
	cert, key := testCert(t)
	write(t, dir, "ca.crt", cert)
	write(t, dir, "c.crt", cert)
	write(t, dir, "c.key", key)
	write(t, dir, "token", []byte("file-token\n"))
	b64 := base64.StdEncoding.EncodeToString
	for _, tc := range []struct {
		name, cluster, user string
		check               func(t *testing.T, c *Credentials)
	}{
		{"inline CA and token", "    certificate-authority-data: " + b64(cert), "    token: abc",
			func(t *testing.T, c *Credentials) {
				if c.Token != "abc" || c.TLS.RootCAs == nil || c.Server.String() != "https://127.0.0.1:6443" {
					t.Fatalf("%+v", c)
				}
			}},
		{"CA file and token file, relative", "    certificate-authority: ca.crt\n    tls-server-name: api.local", "    tokenFile: token",
			func(t *testing.T, c *Credentials) {
				if c.Token != "file-token" || c.TLS.RootCAs == nil || c.TLS.ServerName != "api.local" {
					t.Fatalf("%+v", c)
				}
			}},
		{"client certificate files", "    insecure-skip-tls-verify: true", "    client-certificate: " + filepath.Join(dir, "c.crt") + "\n    client-key: c.key",
			func(t *testing.T, c *Credentials) {
				if len(c.TLS.Certificates) != 1 || !c.TLS.InsecureSkipVerify || c.Token != "" {
					t.Fatalf("%+v", c)
				}
			}},
		{"client certificate inline and basic auth", "", "    client-certificate-data: " + b64(cert) + "\n    client-key-data: " + b64(key) + "\n    username: admin\n    password: pw",
			func(t *testing.T, c *Credentials) {
				if len(c.TLS.Certificates) != 1 || c.Username != "admin" || c.Password != "pw" {
					t.Fatalf("%+v", c)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := write(t, dir, "kubeconfig", []byte(kubeconfigYAML("https://127.0.0.1:6443", tc.cluster, tc.user)))
			c, err := LoadKubeconfig(p)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
	// JSON, the only context, no current-context (IPv6 server).
	p := write(t, dir, "k.json", []byte(`{"clusters":[{"name":"c","cluster":{"server":"https://[::1]:6443"}}],
		"users":[{"name":"u","user":{"token":"t"}}],"contexts":[{"name":"x","context":{"cluster":"c","user":"u"}}]}`))
	if c, err := LoadKubeconfig(p); err != nil || c.Server.Hostname() != "::1" || c.Token != "t" {
		t.Fatalf("JSON kubeconfig: %+v, %v", c, err)
	}
}

func TestLoadKubeconfigErrors(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, yaml, fragment string
	}{
		{"exec plugin", kubeconfigYAML("https://h:1", "", "    exec:\n      command: aws"), "credential plugins"},
		{"auth-provider", kubeconfigYAML("https://h:1", "", "    auth-provider:\n      name: gcp"), "credential plugins"},
		{"no server", kubeconfigYAML("", "", "    token: t"), "is not an http(s) URL"},
		{"ftp server", kubeconfigYAML("ftp://h:1", "", "    token: t"), "is not an http(s) URL"},
		{"token over http", kubeconfigYAML("http://h:1", "", "    token: t"), "clear text"},
		{"proxy-url", kubeconfigYAML("https://h:1", "    proxy-url: http://p:3128", "    token: t"), "proxy-url"},
		{"bad CA data", kubeconfigYAML("https://h:1", "    certificate-authority-data: '!!!'", "    token: t"), "not base64"},
		{"CA without PEM", kubeconfigYAML("https://h:1", "    certificate-authority-data: "+base64.StdEncoding.EncodeToString([]byte("x")), "    token: t"), "no PEM certificate"},
		{"CA file missing", kubeconfigYAML("https://h:1", "    certificate-authority: missing.crt", "    token: t"), "missing.crt"},
		{"token file is a FIFO", kubeconfigYAML("https://h:1", "", "    tokenFile: "+fifo), "not a regular file"},
		{"key without certificate", kubeconfigYAML("https://h:1", "", "    client-key-data: "+base64.StdEncoding.EncodeToString([]byte("k"))), "needs both"},
		{"current context undefined", strings.Replace(kubeconfigYAML("https://h:1", "", "    token: t"), "current-context: ctx", "current-context: gone", 1), `context "gone" is not defined`},
		{"not YAML", "{{{", "not a kubeconfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := write(t, dir, "kc", []byte(tc.yaml))
			_, err := LoadKubeconfig(p)
			if !errors.Is(err, ErrKubeconfig) || !strings.Contains(err.Error(), tc.fragment) || !strings.Contains(err.Error(), p) {
				t.Fatalf("err = %v, want ErrKubeconfig naming %s and %q", err, p, tc.fragment)
			}
		})
	}
	if _, err := LoadKubeconfig(fifo); !errors.Is(err, ErrKubeconfig) {
		t.Fatalf("a FIFO as kubeconfig: %v", err)
	}
	if _, err := LoadKubeconfig(filepath.Join(dir, "none")); !errors.Is(err, ErrKubeconfig) {
		t.Fatalf("a missing kubeconfig: %v", err)
	}
}

// FuzzParseKubeconfig: never panics; success means a usable server URL.
func FuzzParseKubeconfig(f *testing.F) {
	f.Add([]byte(kubeconfigYAML("https://127.0.0.1:6443", "", "    token: abc")))
	f.Add([]byte(`{"clusters":[{"name":"c","cluster":{"server":"https://[::1]:6443"}}],"users":[],"contexts":[{"name":"x","context":{"cluster":"c"}}]}`))
	f.Add([]byte(kubeconfigYAML("http://h:1", "    insecure-skip-tls-verify: true", "    username: a")))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := parseKubeconfig(data, t.TempDir())
		if err != nil {
			return
		}
		if c.Server == nil || c.Server.Host == "" || (c.Server.Scheme != "https" && c.Server.Scheme != "http") || c.TLS == nil {
			t.Fatalf("accepted %+v", c)
		}
	})
}
