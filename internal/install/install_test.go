package install

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInstallWritesEverything: one run puts the plugin and its sibling,
// the config list, the kubeconfig and the TLS files in place, with their
// modes, and leaves other CNIs' files and no temporary file.
func TestInstallWritesEverything(t *testing.T) {
	n := newNode(t)
	writeFile(t, filepath.Join(n.conf, "10-other.conflist"), "other", 0o644)
	writeFile(t, filepath.Join(n.bin, "bridge"), "bridge", 0o755)
	n.install(t)

	for name, want := range map[string]string{pluginName: "plugin binary", KubeSibling: "kube binary"} {
		p := filepath.Join(n.bin, name)
		if m := mode(t, p); m != 0o755 {
			t.Errorf("%s mode %v, want -rwxr-xr-x", p, m)
		}
		if got := readFile(t, p); got != want {
			t.Errorf("%s holds %q, want %q", p, got, want)
		}
	}
	list := filepath.Join(n.conf, conflistName)
	if m := mode(t, list); m != 0o644 {
		t.Errorf("config list mode %v, want -rw-r--r--", m)
	}
	if want := strings.ReplaceAll(conflist, kubeconfigPlaceholder, "/etc/cni/net.d/"+kubeconfigName); readFile(t, list) != want {
		t.Errorf("config list:\n%s\nwant:\n%s", readFile(t, list), want)
	}
	kc := filepath.Join(n.conf, kubeconfigName)
	if m := mode(t, kc); m != 0o600 {
		t.Errorf("kubeconfig mode %v, want -rw------- (it holds a token)", m)
	}
	if got := readFile(t, kc); !strings.Contains(got, "token-1") || !strings.Contains(got, "https://10.96.0.1:443") {
		t.Errorf("kubeconfig:\n%s", got)
	}
	tls := filepath.Join(n.conf, tlsDirName)
	if m := mode(t, tls); m != fs.ModeDir|0o700 {
		t.Errorf("TLS dir mode %v, want drwx------", m)
	}
	checkTLS(t, tls, tlsFiles)
	if readFile(t, filepath.Join(n.conf, "10-other.conflist")) != "other" || readFile(t, filepath.Join(n.bin, "bridge")) != "bridge" {
		t.Error("another CNI's file changed")
	}
	noTempFiles(t, n.bin, n.conf, tls)
}

// checkTLS checks that dir holds exactly want, each file 0600.
func checkTLS(t *testing.T, dir string, want map[string]string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != len(want) {
		t.Errorf("TLS dir holds %d entries, want %d", len(ents), len(want))
	}
	for name, data := range want {
		p := filepath.Join(dir, name)
		if m := mode(t, p); m != 0o600 {
			t.Errorf("%s mode %v, want -rw-------", p, m)
		}
		if got := readFile(t, p); got != data {
			t.Errorf("%s holds %q, want %q", p, got, data)
		}
	}
}

// TestRefreshReplacesAtomically: a refresh rewrites what changed by
// renaming a new file over it (a reader of the old file keeps reading
// it), leaves what did not change alone, repairs modes, and makes the TLS
// dir hold exactly the Secret's files.
func TestRefreshReplacesAtomically(t *testing.T) {
	n := newNode(t)
	n.install(t)
	kc := filepath.Join(n.conf, kubeconfigName)
	list := filepath.Join(n.conf, conflistName)
	plugin := filepath.Join(n.bin, pluginName)
	tls := filepath.Join(n.conf, tlsDirName)
	old, err := os.Open(kc)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	oldContent := readFile(t, kc)
	before := map[string]os.FileInfo{}
	for _, p := range []string{kc, list, plugin, filepath.Join(tls, "ca.crt")} {
		before[p], _ = os.Lstat(p)
	}

	// The kubelet rotates the token, the Secret changes (one file edited,
	// one gone, one new), someone loosens the TLS dir's mode.
	writeFile(t, n.token, "token-2", 0o600)
	writeFile(t, filepath.Join(n.tlsDir, "tls.key"), "new key", 0o400)
	if err := os.Remove(filepath.Join(n.tlsDir, "tls.crt")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(n.tlsDir, "extra.pem"), "extra", 0o400)
	if err := os.Chmod(tls, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(list, 0o666); err != nil {
		t.Fatal(err)
	}
	n.install(t)

	if got := readFile(t, kc); !strings.Contains(got, "token-2") {
		t.Fatalf("kubeconfig after the token rotated:\n%s", got)
	}
	if after, _ := os.Lstat(kc); os.SameFile(before[kc], after) {
		t.Error("the kubeconfig was written in place, not replaced")
	}
	if b, _ := io.ReadAll(old); string(b) != oldContent {
		t.Errorf("a reader of the old kubeconfig saw %q", b)
	}
	for _, p := range []string{plugin, filepath.Join(tls, "ca.crt")} {
		if after, _ := os.Lstat(p); !os.SameFile(before[p], after) {
			t.Errorf("%s was rewritten though it did not change", p)
		}
	}
	if m := mode(t, list); m != 0o644 {
		t.Errorf("config list mode %v after refresh, want -rw-r--r--", m)
	}
	if m := mode(t, tls); m != fs.ModeDir|0o700 {
		t.Errorf("TLS dir mode %v after refresh, want drwx------", m)
	}
	checkTLS(t, tls, map[string]string{"ca.crt": "etcd ca", "tls.key": "new key", "extra.pem": "extra"})
	noTempFiles(t, n.bin, n.conf, tls)
}

// TestRefreshKeepsGoodConflist: a config list the plugin would reject is
// not installed; the node keeps the last good one and no temporary file.
func TestRefreshKeepsGoodConflist(t *testing.T) {
	n := newNode(t)
	n.install(t)
	list := filepath.Join(n.conf, conflistName)
	good := readFile(t, list)
	writeFile(t, n.conflist, strings.Replace(conflist, "10.244.0.0/16", "10.244.0.0/33", 1), 0o644)
	logs, err := n.run(t)
	if err == nil || !strings.Contains(err.Error(), "refusing to install an invalid config list") || !strings.Contains(err.Error(), "10.244.0.0/33") {
		t.Fatalf("err = %v\n%s", err, logs)
	}
	if strings.Contains(err.Error(), "/proc/") {
		t.Errorf("the error names the descriptor's path: %v", err)
	}
	if readFile(t, list) != good {
		t.Fatal("the installed config list changed to a broken one")
	}
	noTempFiles(t, n.conf)
}

// TestSecretLayout: the Secret's mount is the kubelet's, whose files are
// links into a ..data dir; the installer follows those (its own input) and
// copies the files.
func TestSecretLayout(t *testing.T) {
	n := newNode(t)
	if err := os.RemoveAll(n.tlsDir); err != nil {
		t.Fatal(err)
	}
	ts := filepath.Join(n.tlsDir, "..2026_01_01_00_00_00.1")
	mkdirAll(t, ts)
	symlink(t, filepath.Base(ts), filepath.Join(n.tlsDir, "..data"))
	for name, data := range tlsFiles {
		writeFile(t, filepath.Join(ts, name), data, 0o400)
		symlink(t, filepath.Join("..data", name), filepath.Join(n.tlsDir, name))
	}
	n.install(t)
	checkTLS(t, filepath.Join(n.conf, tlsDirName), tlsFiles)
}

// TestUninstall removes exactly what was installed, and nothing of other
// CNIs; a second uninstall, or one where nothing was ever installed,
// succeeds.
func TestUninstall(t *testing.T) {
	n := newNode(t)
	n.install(t)
	writeFile(t, filepath.Join(n.conf, "10-other.conflist"), "other", 0o644)
	writeFile(t, filepath.Join(n.bin, "bridge"), "bridge", 0o755)
	if logs, err := n.run(t, "--uninstall"); err != nil {
		t.Fatalf("uninstall: %v\n%s", err, logs)
	}
	for _, p := range []string{
		filepath.Join(n.bin, pluginName), filepath.Join(n.bin, KubeSibling),
		filepath.Join(n.conf, conflistName), filepath.Join(n.conf, kubeconfigName), filepath.Join(n.conf, tlsDirName),
	} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after uninstall: %v, want gone", p, err)
		}
	}
	if readFile(t, filepath.Join(n.conf, "10-other.conflist")) != "other" || readFile(t, filepath.Join(n.bin, "bridge")) != "bridge" {
		t.Error("uninstall changed another CNI's file")
	}
	if logs, err := n.run(t, "--uninstall"); err != nil {
		t.Fatalf("second uninstall: %v\n%s", err, logs)
	}

	fresh := newNode(t)
	if err := os.RemoveAll(fresh.bin); err != nil {
		t.Fatal(err)
	}
	if logs, err := fresh.run(t, "--uninstall"); err != nil {
		t.Fatalf("uninstall with nothing installed and no bin dir: %v\n%s", err, logs)
	}
}

// TestHostDirThroughRootLink: a host dir reached through a link that only
// root can have made (/var/run -> /run) is fine; the link is followed.
func TestHostDirThroughRootLink(t *testing.T) {
	n := newNode(t)
	etc := filepath.Join(n.host, "etc")
	real := filepath.Join(n.host, "real-etc")
	if err := os.Rename(etc, real); err != nil {
		t.Fatal(err)
	}
	symlink(t, "real-etc", etc)
	n.install(t)
	if m := mode(t, filepath.Join(real, "cni", "net.d", kubeconfigName)); m != 0o600 {
		t.Fatalf("kubeconfig mode %v", m)
	}
}
