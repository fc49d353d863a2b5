package deploy

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/testenv"
)

// shippedConflist returns the config list of ConfigMap ipkeeper-config and
// its key.
func shippedConflist(t *testing.T) (key string, data []byte) {
	t.Helper()
	for _, o := range manifests(t) {
		if o.GetKind() != "ConfigMap" || o.GetName() != "ipkeeper-config" {
			continue
		}
		d, _, err := unstructured.NestedStringMap(o.Object, "data")
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range d {
			if strings.HasSuffix(k, ".conflist") {
				return k, []byte(v)
			}
		}
	}
	t.Fatal("no .conflist key in ConfigMap ipkeeper-config")
	return "", nil
}

// host is a fake node's CNI directories plus the installer's inputs.
type host struct {
	bin, conf     string // the host's /opt/cni/bin and /etc/cni/net.d
	tokenFile     string
	caFile        string
	conflist      string // the ConfigMap's file
	tlsDir        string // the Secret's mount
	plugin        string // the plugin to install
	kube          string // its sibling for kubernetes datastores
	installer     string
	serviceHost   string
	servicePort   string
	extraEnv      []string
	conflistName  string
	kubeconfigOut string
}

func newHost(t *testing.T, s *kubetest.Server) *host {
	t.Helper()
	d := t.TempDir()
	h := &host{
		bin:       filepath.Join(d, "host", "opt", "cni", "bin"),
		conf:      filepath.Join(d, "host", "etc", "cni", "net.d"),
		tokenFile: filepath.Join(d, "sa", "token"),
		caFile:    s.CAFile,
		conflist:  filepath.Join(d, "config", "x.conflist"),
		tlsDir:    filepath.Join(d, "tls"),
		plugin:    static(t, "cmd/ipkeeper"),
		kube:      static(t, "cmd/ipkeeper-kube"), // beside plugin: the installer's default
		installer: static(t, "cmd/ipkeeper-install"),
	}
	for _, dir := range []string{h.bin, h.conf, filepath.Dir(h.tokenFile), filepath.Dir(h.conflist), h.tlsDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	key, data := shippedConflist(t)
	h.conflist = filepath.Join(filepath.Dir(h.conflist), key)
	h.conflistName = key
	writeFile(t, h.conflist, data, 0o644)
	writeFile(t, h.tokenFile, []byte(s.ServiceAccountToken(t, "kube-system", "ipkeeper-node")), 0o600)
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	h.serviceHost, h.servicePort = u.Hostname(), u.Port()
	h.kubeconfigOut = filepath.Join(h.conf, "ipkeeper-kubeconfig")
	return h
}

func writeFile(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil { // as a kubelet swaps files: atomically
		t.Fatal(err)
	}
}

// cmd is the installer as the DaemonSet runs it, against h's directories.
func (h *host) cmd(ctx context.Context, extra ...string) *exec.Cmd {
	args := append([]string{
		"--cni-bin-dir=" + h.bin,
		"--cni-conf-dir=" + h.conf,
		"--plugin=" + h.plugin,
		"--conflist=" + h.conflist,
		"--token-file=" + h.tokenFile,
		"--ca-file=" + h.caFile,
		"--tls-dir=" + h.tlsDir,
	}, extra...)
	c := exec.CommandContext(ctx, h.installer, args...)
	c.Env = append(os.Environ(), "KUBERNETES_SERVICE_HOST="+h.serviceHost, "KUBERNETES_SERVICE_PORT="+h.servicePort)
	c.Env = append(c.Env, h.extraEnv...)
	return c
}

func (h *host) runOnce(t *testing.T, extra ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := h.cmd(ctx, append([]string{"--once"}, extra...)...).CombinedOutput(); err != nil {
		t.Fatalf("ipkeeper-install --once: %v\n%s", err, out)
	}
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode()
}

// noTempFiles checks the installer left no temporary file behind.
func noTempFiles(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".") || strings.HasSuffix(e.Name(), ".tmp") {
				t.Errorf("temporary file left in %s: %s", d, e.Name())
			}
		}
	}
}

// TestInstallerInstalls runs ipkeeper-install once against a fake node's
// CNI dirs with a real ServiceAccount token and the API server's CA: the
// plugin lands executable and runs, the shipped config list is installed
// as it is, and the kubeconfig it writes lets the plugin GET a pod (and
// nothing more).
func TestInstallerInstalls(t *testing.T) {
	s := server(t)
	h := newHost(t, s)
	writeFile(t, filepath.Join(h.tlsDir, "ca.crt"), []byte("etcd ca"), 0o644)
	writeFile(t, filepath.Join(h.tlsDir, "tls.key"), []byte("etcd key"), 0o644)
	// Another CNI's files stay as they are.
	writeFile(t, filepath.Join(h.conf, "10-other.conflist"), []byte(`{"other": true}`), 0o644)
	writeFile(t, filepath.Join(h.bin, "bridge"), []byte("bridge"), 0o755)
	h.runOnce(t)

	installed := filepath.Join(h.bin, "ipkeeper")
	if m := mode(t, installed); m.Perm() != 0o755 || !m.IsRegular() {
		t.Errorf("installed plugin mode %v, want -rwxr-xr-x", m)
	}
	if !sameFile(t, installed, h.plugin) {
		t.Error("installed plugin differs from the image's")
	}
	// The plugin hands kubernetes configs to its sibling, which it looks
	// for next to itself.
	sibling := filepath.Join(h.bin, "ipkeeper-kube")
	if m := mode(t, sibling); m.Perm() != 0o755 || !m.IsRegular() {
		t.Errorf("installed ipkeeper-kube mode %v, want -rwxr-xr-x", m)
	}
	if !sameFile(t, sibling, h.kube) {
		t.Error("installed ipkeeper-kube differs from the image's")
	}
	for _, bin := range []string{installed, sibling} {
		cmd := exec.Command(bin)
		cmd.Env = []string{"CNI_COMMAND=VERSION"}
		cmd.Stdin = strings.NewReader(`{"cniVersion":"1.0.0"}`)
		ver, err := cmd.Output()
		if err != nil || !bytes.Contains(ver, []byte("supportedVersions")) {
			t.Fatalf("installed %s VERSION: %v %s", bin, err, ver)
		}
	}

	_, want := shippedConflist(t)
	got, err := os.ReadFile(filepath.Join(h.conf, h.conflistName))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("installed config list differs from the ConfigMap's:\n%s", got)
	}
	if m := mode(t, filepath.Join(h.conf, h.conflistName)); m.Perm() != 0o644 {
		t.Errorf("config list mode %v, want 0644", m)
	}

	if m := mode(t, h.kubeconfigOut); m.Perm() != 0o600 {
		t.Errorf("kubeconfig mode %v, want 0600 (it holds a token)", m)
	}
	pod := makePod(t, s, "installer")
	checkNodeAccess(t, clientFromKubeconfig(t, h.kubeconfigOut), pod)

	for _, f := range []string{"ca.crt", "tls.key"} {
		p := filepath.Join(h.conf, "ipkeeper-tls", f)
		if m := mode(t, p); m.Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", p, m)
		}
	}
	if m := mode(t, filepath.Join(h.conf, "ipkeeper-tls")); m.Perm() != 0o700 {
		t.Errorf("TLS dir mode %v, want 0700", m)
	}
	if b, _ := os.ReadFile(filepath.Join(h.conf, "10-other.conflist")); string(b) != `{"other": true}` {
		t.Error("another CNI's config list was changed")
	}
	noTempFiles(t, h.bin, h.conf)

	// Uninstall removes exactly what was installed.
	h.extraEnv = []string{"IPKEEPER_INSTALL_UNINSTALL=true"}
	h.runOnce(t)
	for _, p := range []string{installed, sibling, filepath.Join(h.conf, h.conflistName), h.kubeconfigOut, filepath.Join(h.conf, "ipkeeper-tls")} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s after uninstall: %v, want gone", p, err)
		}
	}
	for _, p := range []string{filepath.Join(h.conf, "10-other.conflist"), filepath.Join(h.bin, "bridge")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("uninstall removed another CNI's file %s: %v", p, err)
		}
	}
}

func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	x, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(x, y)
}

// TestInstallerRefreshes: while it runs, a rotated token, an edited
// ConfigMap and a new TLS file reach the node, and SIGTERM stops it
// cleanly, leaving everything installed.
func TestInstallerRefreshes(t *testing.T) {
	s := server(t)
	h := newHost(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := h.cmd(ctx, "--refresh=100ms")
	var stderr testenv.SyncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	waitFile := func(path string, cond func([]byte) bool, what string) {
		t.Helper()
		for {
			b, err := os.ReadFile(path)
			if err == nil && cond(b) {
				return
			}
			select {
			case err := <-exited:
				t.Fatalf("installer exited (%v) while waiting for %s:\n%s", err, what, stderr.String())
			case <-ctx.Done():
				t.Fatalf("%s never happened:\n%s", what, stderr.String())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	first, _ := os.ReadFile(h.tokenFile)
	waitFile(h.kubeconfigOut, func(b []byte) bool { return bytes.Contains(b, first) }, "the first kubeconfig")

	// The kubelet rotates the projected token.
	second := s.ServiceAccountToken(t, "kube-system", "ipkeeper-node")
	if second == string(first) {
		t.Fatal("TokenRequest returned the same token twice")
	}
	writeFile(t, h.tokenFile, []byte(second), 0o600)
	waitFile(h.kubeconfigOut, func(b []byte) bool { return bytes.Contains(b, []byte(second)) }, "the kubeconfig with the rotated token")
	checkNodeAccess(t, clientFromKubeconfig(t, h.kubeconfigOut), makePod(t, s, "installer-refresh"))

	// The admin edits the ConfigMap (a different range).
	_, data := shippedConflist(t)
	edited := bytes.Replace(data, []byte("10.244.0.0/16"), []byte("10.250.0.0/16"), 1)
	if bytes.Equal(edited, data) {
		t.Fatal("the shipped config list has no 10.244.0.0/16 to edit")
	}
	writeFile(t, h.conflist, edited, 0o644)
	waitFile(filepath.Join(h.conf, h.conflistName), func(b []byte) bool { return bytes.Equal(b, edited) }, "the edited config list")

	// An edit that breaks the config is refused: the node keeps the last good one.
	writeFile(t, h.conflist, bytes.Replace(edited, []byte("10.250.0.0/16"), []byte("10.250.0.0/33"), 1), 0o644)
	waitFile(h.conflist, func(b []byte) bool { return bytes.Contains(b, []byte("/33")) }, "the broken edit")
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(stderr.String(), "refusing to install an invalid config list") {
		if time.Now().After(deadline) {
			t.Fatalf("no refusal logged for the broken config:\n%s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if b, _ := os.ReadFile(filepath.Join(h.conf, h.conflistName)); !bytes.Equal(b, edited) {
		t.Fatalf("the installed config list changed to a broken one:\n%s", b)
	}

	// A TLS file appears (Secret created after the DaemonSet).
	writeFile(t, filepath.Join(h.tlsDir, "tls.crt"), []byte("cert"), 0o644)
	waitFile(filepath.Join(h.conf, "ipkeeper-tls", "tls.crt"), func(b []byte) bool { return string(b) == "cert" }, "the TLS file")

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("installer after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-ctx.Done():
		t.Fatal("installer did not stop on SIGTERM")
	}
	if _, err := os.Stat(filepath.Join(h.bin, "ipkeeper")); err != nil {
		t.Fatalf("plugin after the installer stopped: %v", err)
	}
	noTempFiles(t, h.bin, h.conf)
}

// TestInstallerRefusesBadInput: a config list ipkeeper would reject, or a
// missing API server address, fail the installer with a message naming
// the problem, and change nothing on the node.
func TestInstallerRefusesBadInput(t *testing.T) {
	s := server(t)
	cases := []struct {
		name    string
		prepare func(h *host)
		want    string
	}{
		{"invalid IPv4 range", func(h *host) {
			_, data := shippedConflist(t)
			writeFile(t, h.conflist, bytes.Replace(data, []byte("10.244.0.0/16"), []byte("10.244.0.0/33"), 1), 0o644)
		}, "10.244.0.0/33"},
		{"invalid IPv6 range", func(h *host) {
			_, data := shippedConflist(t)
			writeFile(t, h.conflist, bytes.Replace(data, []byte(`"10.244.0.0/16"`), []byte(`"fd00:244::/129"`), 1), 0o644)
		}, "fd00:244::/129"},
		{"not JSON", func(h *host) { writeFile(t, h.conflist, []byte("{"), 0o644) }, "refusing to install an invalid config list"},
		{"no API server", func(h *host) { h.serviceHost, h.servicePort = "", "" }, "KUBERNETES_SERVICE_HOST"},
		{"empty token", func(h *host) { writeFile(t, h.tokenFile, nil, 0o600) }, "token-file"},
		{"node name placeholder without a node name", func(h *host) {
			_, data := shippedConflist(t)
			data = bytes.Replace(data, []byte(`"type": "ipkeeper",`), []byte(`"type": "ipkeeper", "nodeName": "__KUBERNETES_NODE_NAME__",`), 1)
			writeFile(t, h.conflist, data, 0o644)
		}, "__KUBERNETES_NODE_NAME__"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost(t, s)
			h.extraEnv = []string{"NODE_NAME="}
			tc.prepare(h)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			out, err := h.cmd(ctx, "--once").CombinedOutput()
			if err == nil {
				t.Fatalf("installer succeeded:\n%s", out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Fatalf("installer output does not name %q:\n%s", tc.want, out)
			}
			if _, err := os.Stat(filepath.Join(h.conf, h.conflistName)); !os.IsNotExist(err) {
				t.Errorf("config list installed despite the error: %v", err)
			}
			noTempFiles(t, h.bin, h.conf)
		})
	}
}

// TestInstallerNodeName: __KUBERNETES_NODE_NAME__ in the config list
// becomes the node's name from the downward API ($NODE_NAME).
func TestInstallerNodeName(t *testing.T) {
	s := server(t)
	h := newHost(t, s)
	_, data := shippedConflist(t)
	data = bytes.Replace(data, []byte(`"type": "ipkeeper",`), []byte(`"type": "ipkeeper", "nodeName": "__KUBERNETES_NODE_NAME__",`), 1)
	writeFile(t, h.conflist, data, 0o644)
	h.extraEnv = []string{"NODE_NAME=worker-7"}
	h.runOnce(t)
	got, err := os.ReadFile(filepath.Join(h.conf, h.conflistName))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(got, []byte(`"nodeName": "worker-7"`)) || bytes.Contains(got, []byte("__KUBERNETES_NODE_NAME__")) {
		t.Fatalf("node name not substituted:\n%s", got)
	}
}
