//go:build unix

// Package filetrusttest places a file the way a test of a reader needs:
// every unsafe placement filetrust must refuse (a mode open to writers, a
// foreign owner, a planted or foreign symbolic link, a directory others
// may write or own), and the safe ones it must accept (a private file, a
// link of root's, the kubelet's ..data layout of a ServiceAccount volume).
// Cases that change owners need root; the others run as any user.
package filetrusttest

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/testenv"
)

// Nobody is the unprivileged user that owns what root-only cases plant.
const Nobody = 65534

// Case places data at a new path under base.
type Case struct {
	Name string
	// Root: the case changes owners and needs root.
	Root bool
	// Place writes data and returns the path to give the reader and the
	// path a refusal must name (for safe cases, names is "").
	Place func(t testing.TB, base string, data []byte) (path, names string)
}

// Run runs f for each case in its own subtest, with a fresh private
// directory (mode 0700, as is its parent) as base; root cases are skipped
// (or fail under CI) without root.
func Run(t *testing.T, cases []Case, f func(t *testing.T, c Case, base string)) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			if c.Root {
				testenv.NeedRoot(t)
			}
			base := t.TempDir()
			must(t, os.Chmod(filepath.Dir(base), 0o700), os.Chmod(base, 0o700))
			f(t, c, base)
		})
	}
}

// Unsafe lists the placements filetrust refuses.
func Unsafe() []Case {
	return []Case{
		{"mode 0666", false, func(t testing.TB, base string, data []byte) (string, string) {
			p := file(t, base, "f", data, 0o666)
			return p, p
		}},
		{"writable by group", false, func(t testing.TB, base string, data []byte) (string, string) {
			p := file(t, base, "f", data, 0o620)
			return p, p
		}},
		{"a FIFO", false, func(t testing.TB, base string, _ []byte) (string, string) {
			p := filepath.Join(base, "fifo")
			must(t, syscall.Mkfifo(p, 0o600))
			return p, p
		}},
		{"directory writable by others", false, func(t testing.TB, base string, data []byte) (string, string) {
			d := dir(t, base, "open", 0o777)
			return file(t, d, "f", data, 0o600), d
		}},
		{"directory writable by group", false, func(t testing.TB, base string, data []byte) (string, string) {
			d := dir(t, base, "group", 0o770)
			return file(t, d, "f", data, 0o600), d
		}},
		{"directory above writable by others", false, func(t testing.TB, base string, data []byte) (string, string) {
			d := dir(t, base, "open", 0o777)
			return file(t, dir(t, d, "mine", 0o700), "f", data, 0o600), d
		}},
		{"owned by another user", true, func(t testing.TB, base string, data []byte) (string, string) {
			p := file(t, base, "f", data, 0o600)
			must(t, os.Chown(p, Nobody, Nobody))
			return p, p
		}},
		{"symbolic link into another user's directory", true, func(t testing.TB, base string, data []byte) (string, string) {
			d := dir(t, base, "theirs", 0o755)
			f := file(t, d, "f", data, 0o644)
			must(t, os.Chown(f, Nobody, Nobody), os.Chown(d, Nobody, Nobody))
			l := filepath.Join(base, "link")
			must(t, os.Symlink(f, l))
			return l, d
		}},
		{"root's file in a directory another user owns", true, func(t testing.TB, base string, data []byte) (string, string) {
			d := dir(t, base, "theirs", 0o755)
			f := file(t, d, "f", data, 0o600)
			must(t, os.Chown(d, Nobody, Nobody))
			return f, d
		}},
		{"symbolic link owned by another user", true, func(t testing.TB, base string, data []byte) (string, string) {
			f := file(t, base, "f", data, 0o600)
			l := filepath.Join(base, "link")
			must(t, os.Symlink(f, l), os.Lchown(l, Nobody, Nobody))
			return l, l
		}},
		{"symbolic link another user planted in a sticky directory", true, func(t testing.TB, base string, data []byte) (string, string) {
			tmp := dir(t, base, "tmp", 0o777|fs.ModeSticky)
			f := file(t, base, "f", data, 0o600)
			l := filepath.Join(tmp, "link")
			must(t, os.Symlink(f, l), os.Lchown(l, Nobody, Nobody))
			return l, l
		}},
	}
}

// Safe lists placements filetrust accepts.
func Safe() []Case {
	return []Case{
		{"mode 0600", false, func(t testing.TB, base string, data []byte) (string, string) {
			return file(t, base, "f", data, 0o600), ""
		}},
		{"mode 0644", false, func(t testing.TB, base string, data []byte) (string, string) {
			return file(t, base, "f", data, 0o644), ""
		}},
		{"in a sticky directory writable by others", false, func(t testing.TB, base string, data []byte) (string, string) {
			return file(t, dir(t, base, "tmp", 0o777|fs.ModeSticky), "f", data, 0o600), ""
		}},
		{"symbolic link of this user's (root's under root)", false, func(t testing.TB, base string, data []byte) (string, string) {
			file(t, dir(t, base, "real", 0o755), "f", data, 0o600)
			l := filepath.Join(base, "link")
			must(t, os.Symlink("real/f", l))
			return l, ""
		}},
		{"kubelet's ServiceAccount volume layout", false, func(t testing.TB, base string, data []byte) (string, string) {
			return filepath.Join(KubeletVolume(t, base, map[string][]byte{"token": data}), "token"), ""
		}},
	}
}

// KubeletVolume lays out files as the kubelet does for a ServiceAccount
// token or a Secret — a tmpfs directory of mode 1777 (named
// "serviceaccount", under base), the files (mode 0644) in a timestamped
// directory, a ..data link to it and one link per file through ..data —
// and returns the volume's directory. Everything is the caller's (root's,
// under root).
func KubeletVolume(t testing.TB, base string, files map[string][]byte) string {
	t.Helper()
	vol := dir(t, base, "serviceaccount", 0o777|fs.ModeSticky)
	KubeletUpdate(t, vol, "..2026_11_27_13_00_00.000000001", files)
	for name := range files {
		must(t, os.Symlink(filepath.Join("..data", name), filepath.Join(vol, name)))
	}
	return vol
}

// KubeletUpdate writes files into a new timestamped directory ts of vol
// and points vol/..data at it atomically (a new link renamed over the old),
// as the kubelet does when a token or Secret changes; it returns ts's path.
func KubeletUpdate(t testing.TB, vol, ts string, files map[string][]byte) string {
	t.Helper()
	d := dir(t, vol, ts, 0o755)
	for name, data := range files {
		file(t, d, name, data, 0o644)
	}
	tmp := filepath.Join(vol, "..data_tmp")
	must(t, os.Symlink(ts, tmp), os.Rename(tmp, filepath.Join(vol, "..data")))
	return d
}

func file(t testing.TB, d, name string, data []byte, mode fs.FileMode) string {
	t.Helper()
	p := filepath.Join(d, name)
	must(t, os.WriteFile(p, data, 0o600), os.Chmod(p, mode))
	return p
}

func dir(t testing.TB, parent, name string, mode fs.FileMode) string {
	t.Helper()
	p := filepath.Join(parent, name)
	must(t, os.Mkdir(p, 0o700), os.Chmod(p, mode))
	return p
}

func must(t testing.TB, errs ...error) {
	t.Helper()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
