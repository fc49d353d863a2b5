package install

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/safefs"
	"github.com/ipkeeper/ipkeeper/internal/testenv"
)

// plant is a symbolic link planted where the installer works, pointing
// into the victim dir.
type plant struct {
	name string
	// at returns the link's path and its target.
	at func(n *node) (link, target string)
	// conf: the link is in the config dir, where a refresh works too.
	conf bool
}

func plants() []plant {
	inTLS := func(name string) func(n *node) (string, string) {
		return func(n *node) (string, string) {
			return filepath.Join(n.conf, tlsDirName, name), filepath.Join(n.victim, "precious")
		}
	}
	inConf := func(name, target string) func(n *node) (string, string) {
		return func(n *node) (string, string) { return filepath.Join(n.conf, name), filepath.Join(n.victim, target) }
	}
	inBin := func(name string) func(n *node) (string, string) {
		return func(n *node) (string, string) { return filepath.Join(n.bin, name), filepath.Join(n.victim, name) }
	}
	return []plant{
		{"conf dir", func(n *node) (string, string) { return n.conf, n.victim }, true},
		{"bin dir", func(n *node) (string, string) { return n.bin, n.victim }, false},
		{"TLS dir", inConf(tlsDirName, tlsDirName), true},
		{"TLS CA", inTLS("ca.crt"), true},
		{"TLS cert", inTLS("tls.crt"), true},
		{"TLS key", inTLS("tls.key"), true},
		{"stale TLS file", inTLS("old.key"), true},
		{"kubeconfig", inConf(kubeconfigName, kubeconfigName), true},
		{"kubeconfig, dangling", inConf(kubeconfigName, "new"), true},
		{"config list", inConf(conflistName, conflistName), true},
		{"plugin", inBin(pluginName), false},
		{"plugin sibling", inBin(KubeSibling), false},
	}
}

// plantLink replaces what is at p's path in n by the link, and returns
// the link's path. A link planted in the TLS dir makes the dir if needed.
func plantLink(t *testing.T, n *node, p plant) string {
	t.Helper()
	link, target := p.at(n)
	if err := os.RemoveAll(link); err != nil {
		t.Fatal(err)
	}
	mkdirAll(t, filepath.Dir(link))
	symlink(t, target, link)
	return link
}

// wantRefusal checks that err refuses the link, naming it.
func wantRefusal(t *testing.T, err error, link, logs string) {
	t.Helper()
	if err == nil {
		t.Fatalf("the installer followed or replaced the planted link %s without an error\n%s", link, logs)
	}
	if !errors.Is(err, safefs.ErrSymlink) || !strings.Contains(err.Error(), link+" is a symbolic link; refusing to follow it") {
		t.Fatalf("err = %v, want the refusal of the link %s", err, link)
	}
}

// sameState fails t when the host's dirs or the victim changed.
func sameState(t *testing.T, n *node, before string) {
	t.Helper()
	if after := state(t, n.host, n.victim); after != before {
		t.Fatalf("a refused run changed files:\n%s\nwas:\n%s", after, before)
	}
}

// TestInstallRefusesPlantedLinks: on a fresh node, a link planted where
// the installer works is refused, naming it, and nothing changes: neither
// what it points to nor anything in the host's dirs.
func TestInstallRefusesPlantedLinks(t *testing.T) {
	for _, p := range plants() {
		t.Run(p.name, func(t *testing.T) {
			n := newNode(t)
			link := plantLink(t, n, p)
			before := state(t, n.host, n.victim)
			logs, err := n.run(t)
			wantRefusal(t, err, link, logs)
			sameState(t, n, before)
		})
	}
}

// TestRefreshRefusesPlantedLinks: the same on a node where ipkeeper is
// installed, through a restarted installer and through the periodic
// refresh.
func TestRefreshRefusesPlantedLinks(t *testing.T) {
	for _, p := range plants() {
		t.Run(p.name, func(t *testing.T) {
			n := newNode(t)
			n.install(t)
			writeFile(t, n.token, "token-2", 0o600) // something to refresh
			link := plantLink(t, n, p)
			before := state(t, n.host, n.victim)
			logs, err := n.run(t)
			wantRefusal(t, err, link, logs)
			sameState(t, n, before)
			if p.conf {
				err := refresh(n.options(t), slog.New(slog.DiscardHandler))
				wantRefusal(t, err, link, "")
				sameState(t, n, before)
			}
		})
	}
}

// TestUninstallRefusesPlantedLinks: uninstall with a link planted in the
// place of one of its files or dirs refuses it and removes nothing.
func TestUninstallRefusesPlantedLinks(t *testing.T) {
	for _, p := range plants() {
		t.Run(p.name, func(t *testing.T) {
			n := newNode(t)
			n.install(t)
			link := plantLink(t, n, p)
			before := state(t, n.host, n.victim)
			logs, err := n.run(t, "--uninstall")
			wantRefusal(t, err, link, logs)
			sameState(t, n, before)
		})
	}
}

// TestRefusesOtherPlantedFiles: a FIFO, a directory or a subdirectory
// where the installer needs a regular file is refused (without blocking on
// the FIFO), and nothing changes.
func TestRefusesOtherPlantedFiles(t *testing.T) {
	cases := []struct {
		name  string
		plant func(t *testing.T, n *node) string
		want  string
	}{
		{"FIFO as the TLS key", func(t *testing.T, n *node) string {
			p := filepath.Join(n.conf, tlsDirName, "tls.key")
			mkdirAll(t, filepath.Dir(p))
			if err := syscall.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}, "is a FIFO, not a regular file"},
		{"directory as the kubeconfig", func(t *testing.T, n *node) string {
			p := filepath.Join(n.conf, kubeconfigName)
			mkdirAll(t, p)
			writeFile(t, filepath.Join(p, "inside"), "x", 0o644)
			return p
		}, "is a directory, not a regular file"},
		{"subdirectory in the TLS dir", func(t *testing.T, n *node) string {
			p := filepath.Join(n.conf, tlsDirName, "sub")
			mkdirAll(t, p)
			writeFile(t, filepath.Join(p, "inside"), "x", 0o644)
			return p
		}, "is a directory, not a regular file"},
		{"file as the TLS dir", func(t *testing.T, n *node) string {
			p := filepath.Join(n.conf, tlsDirName)
			writeFile(t, p, "x", 0o644)
			return p
		}, "is a regular file, not a directory"},
	}
	for _, tc := range cases {
		for _, uninstall := range []bool{false, true} {
			name := tc.name
			var extra []string
			if uninstall {
				name += ", uninstall"
				extra = []string{"--uninstall"}
			}
			t.Run(name, func(t *testing.T) {
				n := newNode(t)
				p := tc.plant(t, n)
				before := state(t, n.host, n.victim)
				logs, err := n.run(t, extra...)
				if err == nil || !strings.Contains(err.Error(), p+" "+tc.want) {
					t.Fatalf("err = %v, want %q naming %s\n%s", err, tc.want, p, logs)
				}
				sameState(t, n, before)
			})
		}
	}
}

// TestRefusesUntrustedHostDirs: a host dir others can write to, a link
// above it that another user owns, or a TLS dir another user owns (who
// could swap the key and CA) is refused, naming it, and nothing changes.
func TestRefusesUntrustedHostDirs(t *testing.T) {
	testenv.NeedRoot(t) // to give files to another user
	const other = 4321
	cases := []struct {
		name  string
		plant func(t *testing.T, n *node) string
		want  string
	}{
		{"conf dir writable by others", func(t *testing.T, n *node) string {
			if err := os.Chmod(n.conf, 0o777); err != nil {
				t.Fatal(err)
			}
			return n.conf
		}, "is writable by other users"},
		{"bin dir owned by another user", func(t *testing.T, n *node) string {
			if err := os.Chown(n.bin, other, other); err != nil {
				t.Fatal(err)
			}
			return n.bin
		}, "is owned by uid 4321"},
		{"link above the conf dir owned by another user", func(t *testing.T, n *node) string {
			etc := filepath.Join(n.host, "etc")
			if err := os.Rename(etc, filepath.Join(n.host, "real-etc")); err != nil {
				t.Fatal(err)
			}
			symlink(t, "real-etc", etc)
			if err := os.Lchown(etc, other, other); err != nil {
				t.Fatal(err)
			}
			return etc
		}, "is owned by uid 4321"},
		{"TLS dir owned by another user", func(t *testing.T, n *node) string {
			p := filepath.Join(n.conf, tlsDirName)
			mkdirAll(t, p)
			if err := os.Chown(p, other, other); err != nil {
				t.Fatal(err)
			}
			return p
		}, "is owned by uid 4321"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			p := tc.plant(t, n)
			before := state(t, n.host, n.victim)
			logs, err := n.run(t)
			if !errors.Is(err, safefs.ErrUntrusted) || !strings.Contains(err.Error(), p+" "+tc.want) {
				t.Fatalf("err = %v, want %q naming %s\n%s", err, tc.want, p, logs)
			}
			sameState(t, n, before)
		})
	}
}
