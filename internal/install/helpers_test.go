package install

import (
	"bytes"
	"context"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// conflist is a config list the plugin accepts once the kubeconfig's
// path is filled in.
const conflist = `{
  "cniVersion": "1.0.0",
  "name": "ipkeeper",
  "plugins": [
    {
      "type": "ptp",
      "ipam": {
        "type": "ipkeeper",
        "datastore": {"type": "kubernetes", "kubeconfig": "__KUBECONFIG_FILEPATH__"},
        "ranges": [[{"subnet": "10.244.0.0/16"}]]
      }
    }
  ]
}
`

const caPEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

// The names the installer writes.
const (
	pluginName     = "ipkeeper"
	conflistName   = "90-ipkeeper.conflist"
	kubeconfigName = "ipkeeper-kubeconfig"
)

// tlsFiles is the content of the Secret the installer copies.
var tlsFiles = map[string]string{"ca.crt": "etcd ca", "tls.crt": "etcd cert", "tls.key": "etcd key"}

// node is a fake node: the host's CNI dirs as the DaemonSet mounts them,
// the installer's inputs in its container, and a victim dir that planted
// links point to.
type node struct {
	host      string // holds bin and conf
	bin, conf string
	plugin    string
	token     string
	conflist  string
	tlsDir    string
	victim    string
}

func newNode(t *testing.T) *node {
	t.Helper()
	root := t.TempDir()
	n := &node{
		host:   filepath.Join(root, "host"),
		bin:    filepath.Join(root, "host", "opt", "cni", "bin"),
		conf:   filepath.Join(root, "host", "etc", "cni", "net.d"),
		victim: filepath.Join(root, "victim"),
	}
	src := filepath.Join(root, "container")
	n.plugin = filepath.Join(src, "bin", pluginName)
	n.token = filepath.Join(src, "sa", "token")
	n.conflist = filepath.Join(src, "config", conflistName)
	n.tlsDir = filepath.Join(src, "tls")
	for _, d := range []string{n.bin, n.conf, filepath.Dir(n.plugin), filepath.Dir(n.token), filepath.Dir(n.conflist), n.tlsDir} {
		mkdirAll(t, d)
	}
	writeFile(t, n.plugin, "plugin binary", 0o755)
	writeFile(t, filepath.Join(src, "bin", KubeSibling), "kube binary", 0o755)
	writeFile(t, n.token, "token-1", 0o600)
	writeFile(t, filepath.Join(src, "sa", "ca.crt"), caPEM, 0o644)
	writeFile(t, n.conflist, conflist, 0o644)
	for name, data := range tlsFiles {
		writeFile(t, filepath.Join(n.tlsDir, name), data, 0o400)
	}
	// The victim holds files under every name the installer uses, so a
	// write, chmod or removal through a link shows.
	mkdirAll(t, filepath.Join(n.victim, tlsDirName))
	for _, name := range []string{"precious", pluginName, KubeSibling, conflistName, kubeconfigName, filepath.Join(tlsDirName, "tls.key"), filepath.Join(tlsDirName, "other")} {
		writeFile(t, filepath.Join(n.victim, name), "victim's "+name, 0o644)
	}
	return n
}

func mkdirAll(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, p, data string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func symlink(t *testing.T, target, p string) {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

// options are the installer's settings for n, as the DaemonSet gives them.
func (n *node) options(t *testing.T, extra ...string) Options {
	t.Helper()
	args := append([]string{
		"--cni-bin-dir=" + n.bin,
		"--cni-conf-dir=" + n.conf,
		"--plugin=" + n.plugin,
		"--conflist=" + n.conflist,
		"--token-file=" + n.token,
		"--ca-file=" + filepath.Join(filepath.Dir(n.token), "ca.crt"),
		"--server=https://10.96.0.1:443",
		"--tls-dir=" + n.tlsDir,
		"--once",
	}, extra...)
	o, err := ParseFlags(args, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// run runs the installer once and returns its log and error.
func (n *node) run(t *testing.T, extra ...string) (string, error) {
	t.Helper()
	var logs bytes.Buffer
	err := Run(context.Background(), n.options(t, extra...), slog.New(slog.NewTextHandler(&logs, nil)))
	return logs.String(), err
}

// install runs the installer once and fails t if it fails.
func (n *node) install(t *testing.T, extra ...string) {
	t.Helper()
	if logs, err := n.run(t, extra...); err != nil {
		t.Fatalf("install: %v\n%s", err, logs)
	}
}

// state describes the trees under roots without following links: every
// path with its mode and owner, and a file's content or a link's target.
func state(t *testing.T, roots ...string) string {
	t.Helper()
	var b strings.Builder
	for _, root := range roots {
		err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := os.Lstat(p)
			if err != nil {
				return err
			}
			b.WriteString(p + " " + fi.Mode().String())
			switch {
			case fi.Mode()&fs.ModeSymlink != 0:
				target, _ := os.Readlink(p)
				b.WriteString(" -> " + target)
			case fi.Mode().IsRegular():
				b.WriteString(" " + readFile(t, p))
			}
			b.WriteString("\n")
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// noTempFiles checks that no temporary file is left in dirs.
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

func mode(t *testing.T, p string) os.FileMode {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode()
}
