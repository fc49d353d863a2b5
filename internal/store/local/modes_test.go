//go:build unix

package local

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestModes(t *testing.T) {
	// With umask 0 the modes on disk are exactly the ones Open asks for.
	old := syscall.Umask(0)
	defer syscall.Umask(old)

	dir := filepath.Join(privateDir(t), "var", "lib", "ipkeeper")
	s := openT(t, dir)
	for _, c := range []struct {
		path string
		want os.FileMode
	}{
		{dir, os.ModeDir | 0o700},
		{filepath.Dir(dir), os.ModeDir | 0o700},
		{filepath.Join(dir, FileName), 0o600},
	} {
		fi, err := os.Stat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != c.want {
			t.Errorf("%s: mode %v, want %v", c.path, fi.Mode(), c.want)
		}
	}
	if s.Path() != filepath.Join(dir, FileName) {
		t.Errorf("Path() = %q", s.Path())
	}

	// An existing directory keeps its mode.
	existing := privateDir(t)
	if err := os.Chmod(existing, 0o755); err != nil {
		t.Fatal(err)
	}
	openT(t, existing)
	if fi, _ := os.Stat(existing); fi.Mode().Perm() != 0o755 {
		t.Errorf("existing dir mode changed to %v", fi.Mode().Perm())
	}
}
