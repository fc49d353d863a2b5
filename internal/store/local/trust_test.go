//go:build unix

package local

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/testenv"
)

// nobody is the unprivileged user that plants files in the root-only cases.
const nobody = 65534

// privateDir is t.TempDir made 0700 with its parent: under umask 0 (which
// the tests set so that they see the modes Open asks for) the testing
// package creates both world-writable, and Open refuses those.
func privateDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	mustDo(t, os.Chmod(filepath.Dir(d), 0o700), os.Chmod(d, 0o700))
	return d
}

// tree lists every path under root with its type and mode, to show that a
// refused Open created and changed nothing.
func mustDo(t *testing.T, errs ...error) {
	t.Helper()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// Open refuses every datastore path that cannot be used safely, with an
// ErrBadPath error naming the path, and creates or changes nothing: the
// planted target of a symbolic link stays as it was.
func TestOpenRefusesUnsafePaths(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	for _, c := range []struct {
		name string
		root bool
		// setup prepares base and returns the datastore directory to open
		// and the path the error must name.
		setup func(t *testing.T, base string) (dir, names string)
	}{
		{"empty path", false, func(t *testing.T, base string) (string, string) { return "", "empty" }},
		{"NUL in the path", false, func(t *testing.T, base string) (string, string) {
			return base + "/a\x00b", "NUL"
		}},
		{"path is a regular file", false, func(t *testing.T, base string) (string, string) {
			f := filepath.Join(base, "file")
			mustDo(t, os.WriteFile(f, []byte("x"), 0o600))
			return f, f
		}},
		{"path lies under a regular file", false, func(t *testing.T, base string) (string, string) {
			f := filepath.Join(base, "file")
			mustDo(t, os.WriteFile(f, []byte("x"), 0o600))
			return filepath.Join(f, "sub", "dir"), f
		}},
		{"directory writable by others", false, func(t *testing.T, base string) (string, string) {
			d := filepath.Join(base, "open")
			mustDo(t, os.Mkdir(d, 0o777))
			return d, d
		}},
		{"directory writable by group", false, func(t *testing.T, base string) (string, string) {
			d := filepath.Join(base, "group")
			mustDo(t, os.Mkdir(d, 0o770))
			return d, d
		}},
		{"sticky world-writable directory as the store directory", false, func(t *testing.T, base string) (string, string) {
			d := filepath.Join(base, "sticky")
			mustDo(t, os.Mkdir(d, 0o777), os.Chmod(d, 0o777|fs.ModeSticky))
			return d, d
		}},
		{"missing directory under a directory writable by others", false, func(t *testing.T, base string) (string, string) {
			d := filepath.Join(base, "open")
			mustDo(t, os.Mkdir(d, 0o777))
			return filepath.Join(d, "new", "store"), d
		}},
		{"database file is a symbolic link", false, func(t *testing.T, base string) (string, string) {
			d := filepath.Join(base, "store")
			mustDo(t, os.Mkdir(d, 0o700), os.WriteFile(filepath.Join(base, "target"), []byte("precious"), 0o644),
				os.Symlink(filepath.Join(base, "target"), filepath.Join(d, FileName)))
			return d, filepath.Join(d, FileName)
		}},
		{"database file is a dangling symbolic link", false, func(t *testing.T, base string) (string, string) {
			d := filepath.Join(base, "store")
			mustDo(t, os.Mkdir(d, 0o700), os.Symlink(filepath.Join(base, "created-by-root"), filepath.Join(d, FileName)))
			return d, filepath.Join(d, FileName)
		}},
		{"database file is a FIFO", false, func(t *testing.T, base string) (string, string) {
			d := filepath.Join(base, "store")
			mustDo(t, os.Mkdir(d, 0o700), syscall.Mkfifo(filepath.Join(d, FileName), 0o600))
			return d, filepath.Join(d, FileName)
		}},
		{"database file is a directory", false, func(t *testing.T, base string) (string, string) {
			d := filepath.Join(base, "store")
			mustDo(t, os.MkdirAll(filepath.Join(d, FileName), 0o700))
			return d, filepath.Join(d, FileName)
		}},
		{"database file has a second hard link", false, func(t *testing.T, base string) (string, string) {
			d := filepath.Join(base, "store")
			mustDo(t, os.Mkdir(d, 0o700), os.WriteFile(filepath.Join(base, "other"), nil, 0o600),
				os.Link(filepath.Join(base, "other"), filepath.Join(d, FileName)))
			return d, filepath.Join(d, FileName)
		}},
		{"directory owned by another user", true, func(t *testing.T, base string) (string, string) {
			d := filepath.Join(base, "theirs")
			mustDo(t, os.Mkdir(d, 0o700), os.Chown(d, nobody, nobody))
			return d, d
		}},
		{"directory above owned by another user", true, func(t *testing.T, base string) (string, string) {
			d := filepath.Join(base, "theirs")
			mustDo(t, os.MkdirAll(filepath.Join(d, "mine"), 0o755), os.Chown(d, nobody, nobody))
			return filepath.Join(d, "mine"), d
		}},
		{"directory planted by another user in a sticky directory", true, func(t *testing.T, base string) (string, string) {
			tmp := filepath.Join(base, "tmp")
			mustDo(t, os.Mkdir(tmp, 0o777), os.Chmod(tmp, 0o777|fs.ModeSticky))
			d := filepath.Join(tmp, "ipkeeper")
			mustDo(t, os.Mkdir(d, 0o700), os.Chown(d, nobody, nobody))
			return d, d
		}},
		{"symbolic link planted by another user in a sticky directory", true, func(t *testing.T, base string) (string, string) {
			tmp := filepath.Join(base, "tmp")
			mustDo(t, os.Mkdir(tmp, 0o777), os.Chmod(tmp, 0o777|fs.ModeSticky))
			target := filepath.Join(base, "rootdir")
			mustDo(t, os.Mkdir(target, 0o700))
			d := filepath.Join(tmp, "ipkeeper")
			mustDo(t, os.Symlink(target, d), os.Lchown(d, nobody, nobody))
			return d, d
		}},
		{"database file owned by another user", true, func(t *testing.T, base string) (string, string) {
			d := filepath.Join(base, "store")
			f := filepath.Join(d, FileName)
			mustDo(t, os.Mkdir(d, 0o700), os.WriteFile(f, nil, 0o600), os.Chown(f, nobody, nobody))
			return d, f
		}},
		{"database file a symbolic link owned by another user", true, func(t *testing.T, base string) (string, string) {
			d := filepath.Join(base, "store")
			f := filepath.Join(d, FileName)
			mustDo(t, os.Mkdir(d, 0o700), os.WriteFile(filepath.Join(base, "target"), []byte("precious"), 0o600),
				os.Symlink(filepath.Join(base, "target"), f), os.Lchown(f, nobody, nobody))
			return d, f
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.root {
				testenv.NeedRoot(t)
			}
			base := privateDir(t)
			dir, names := c.setup(t, base)
			before := testenv.FileModes(t, base)
			s, err := Open(t.Context(), dir)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded", dir)
			}
			if !errors.Is(err, ErrBadPath) || !strings.Contains(err.Error(), names) {
				t.Fatalf("Open(%q) = %v, want ErrBadPath naming %q", dir, err, names)
			}
			if after := testenv.FileModes(t, base); !slices.Equal(before, after) {
				t.Fatalf("refused Open changed the tree:\nbefore %v\nafter  %v", before, after)
			}
			if b, err := os.ReadFile(filepath.Join(base, "target")); err == nil && string(b) != "precious" {
				t.Fatalf("link target overwritten: %q", b)
			}
		})
	}
}

// What is safe is accepted: a store directory reached through a symbolic
// link the caller owns, under a sticky world-writable directory like /tmp;
// an existing database file open to other users is made 0600.
func TestOpenAcceptsSafePaths(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	base := privateDir(t)
	tmp := filepath.Join(base, "tmp")
	mustDo(t, os.Mkdir(tmp, 0o777), os.Chmod(tmp, 0o777|fs.ModeSticky))
	real := filepath.Join(tmp, "real")
	mustDo(t, os.Mkdir(real, 0o755), os.Symlink("real", filepath.Join(tmp, "link")))
	s := openT(t, filepath.Join(tmp, "link"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(real, FileName)
	mustDo(t, os.Chmod(db, 0o666))
	openT(t, real)
	fi, err := os.Stat(db)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("existing 0666 database left at %v, want 0600", fi.Mode().Perm())
	}
}
