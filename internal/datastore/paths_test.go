//go:build unix

package datastore

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
	"github.com/ipkeeper/ipkeeper/internal/testenv"
)

// nobody is the unprivileged user that plants files in the root-only cases.
const nobody = 65534

func must(t *testing.T, errs ...error) {
	t.Helper()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// A plugin's Open of an etcd datastore refuses a node lock directory
// another user could change, and lock files that are links, with ErrBadPath naming the
// path; nothing is created, and the target of a planted link is left
// alone. A safe directory gets a 0700 lock directory.
func TestLockDirTrust(t *testing.T) {
	ds := etcdDS("/trust")
	lock := lockName(etcdConfig(ds))
	for _, c := range []struct {
		name string
		root bool
		// setup prepares base and returns the lock directory and the path
		// the error must name.
		setup func(t *testing.T, base string) (dir, names string)
	}{
		{"world-writable sticky lock directory", false, func(t *testing.T, base string) (string, string) {
			d := filepath.Join(base, "run")
			must(t, os.Mkdir(d, 0o700), os.Chmod(d, 0o777|fs.ModeSticky))
			return d, d
		}},
		{"group-writable lock directory", false, func(t *testing.T, base string) (string, string) {
			d := filepath.Join(base, "run")
			must(t, os.Mkdir(d, 0o700), os.Chmod(d, 0o770))
			return d, d
		}},
		{"lock file is a symbolic link", false, func(t *testing.T, base string) (string, string) {
			d := filepath.Join(base, "run")
			must(t, os.Mkdir(d, 0o700), os.Symlink(filepath.Join(base, "elsewhere"), filepath.Join(d, lock)))
			return d, filepath.Join(d, lock)
		}},
		{"lock file is a FIFO", false, func(t *testing.T, base string) (string, string) {
			d := filepath.Join(base, "run")
			must(t, os.Mkdir(d, 0o700), syscall.Mkfifo(filepath.Join(d, lock), 0o600))
			return d, filepath.Join(d, lock)
		}},
		{"lock directory owned by another user", true, func(t *testing.T, base string) (string, string) {
			d := filepath.Join(base, "run")
			must(t, os.Mkdir(d, 0o700), os.Chown(d, nobody, nobody))
			return d, d
		}},
		{"lock file owned by another user", true, func(t *testing.T, base string) (string, string) {
			d := filepath.Join(base, "run")
			f := filepath.Join(d, lock)
			must(t, os.Mkdir(d, 0o700), os.WriteFile(f, nil, 0o600), os.Chown(f, nobody, nobody))
			return d, f
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.root {
				testenv.NeedRoot(t)
			}
			base := t.TempDir()
			dir, names := c.setup(t, base)
			t.Setenv(LockDirEnv, dir)
			before := testenv.FileModes(t, base)
			s, err := Open(t.Context(), ds, Options{Plugin: true})
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, ErrBadPath) || !strings.Contains(err.Error(), names) {
				t.Fatalf("Open = %v, want ErrBadPath naming %s", err, names)
			}
			if after := testenv.FileModes(t, base); !slices.Equal(before, after) {
				t.Fatalf("refused Open changed the tree:\nbefore %v\nafter  %v", before, after)
			}
		})
	}

	t.Run("safe lock directory", func(t *testing.T) {
		old := syscall.Umask(0)
		defer syscall.Umask(old)
		base := t.TempDir()
		must(t, os.Chmod(filepath.Dir(base), 0o700), os.Chmod(base, 0o700))
		dir := filepath.Join(base, "run", "ipkeeper")
		t.Setenv(LockDirEnv, dir)
		srv := etcdtest.ForTest(t, nil)
		ds := config.Datastore{Type: config.DatastoreEtcd, Endpoints: []string{srv.Endpoint}, Prefix: "/trust"}
		s, err := Open(t.Context(), ds, Options{Plugin: true})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for p, want := range map[string]fs.FileMode{dir: fs.ModeDir | 0o700, filepath.Join(dir, lockName(etcdConfig(ds))): 0o600} {
			fi, err := os.Lstat(p)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode() != want {
				t.Errorf("%s: mode %v, want %v", p, fi.Mode(), want)
			}
		}
	})
}

// A local datastore path that is a regular file, lies under one or holds a
// NUL byte fails with ErrBadPath and creates nothing.
func TestLocalPathErrors(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "file")
	must(t, os.WriteFile(file, []byte("x"), 0o600))
	for _, p := range []string{file, filepath.Join(file, "sub"), filepath.Join(base, "a\x00b")} {
		before := testenv.FileModes(t, base)
		s, err := Open(t.Context(), config.Datastore{Type: config.DatastoreLocal, Path: p}, Options{})
		if err == nil {
			s.Close()
			t.Fatalf("Open(%q) succeeded", p)
		}
		if !errors.Is(err, ErrBadPath) {
			t.Fatalf("Open(%q) = %v, want ErrBadPath", p, err)
		}
		if after := testenv.FileModes(t, base); !slices.Equal(before, after) {
			t.Fatalf("Open(%q) changed the tree: %v -> %v", p, before, after)
		}
	}
}
