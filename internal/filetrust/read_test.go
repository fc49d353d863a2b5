//go:build unix

package filetrust_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/filetrust"
	"github.com/ipkeeper/ipkeeper/internal/filetrust/filetrusttest"
)

// ReadFile refuses every unsafe placement with ErrUnsafe naming what, the
// path given and the path that breaks the rule.
func TestReadFileRefusesUnsafe(t *testing.T) {
	filetrusttest.Run(t, filetrusttest.Unsafe(), func(t *testing.T, c filetrusttest.Case, base string) {
		path, names := c.Place(t, base, []byte("secret"))
		b, err := filetrust.ReadFile("client key", path, 1<<20)
		if !errors.Is(err, filetrust.ErrUnsafe) || !strings.Contains(err.Error(), names) ||
			!strings.Contains(err.Error(), "client key "+path) {
			t.Fatalf("ReadFile(%s) = %q, %v; want ErrUnsafe naming client key %s and %s", path, b, err, path, names)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Fatalf("message shows the content: %v", err)
		}
		t.Log(err)
	})
}

// ReadFile reads every safe placement.
func TestReadFileAcceptsSafe(t *testing.T) {
	filetrusttest.Run(t, filetrusttest.Safe(), func(t *testing.T, c filetrusttest.Case, base string) {
		path, _ := c.Place(t, base, []byte("token"))
		b, err := filetrust.ReadFile("token", path, 1<<20)
		if err != nil || string(b) != "token" {
			t.Fatalf("ReadFile(%s) = %q, %v", path, b, err)
		}
	})
}

// The other refusals: nothing there, a directory, a path through a file,
// a file over the limit, an empty path.
func TestReadFileUnusable(t *testing.T) {
	base := t.TempDir()
	f := filepath.Join(base, "f")
	if err := os.WriteFile(f, []byte("12345"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{filepath.Join(base, "missing"), "no such file"},
		{base, "is a directory"},
		{filepath.Join(f, "x"), "is not a directory"},
		{f + "/", ""},
		{"", "is empty"},
		{"a\x00b", "NUL"},
	} {
		_, err := filetrust.ReadFile("kubeconfig", c.path, 4)
		if !errors.Is(err, filetrust.ErrUnsafe) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ReadFile(%q) = %v, want ErrUnsafe saying %q", c.path, err, c.want)
		}
	}
	if _, err := filetrust.ReadFile("kubeconfig", filepath.Join(base, "missing"), 4); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v, want fs.ErrNotExist too", err)
	}
	if _, err := filetrust.ReadFile("kubeconfig", f, 4); err == nil || !strings.Contains(err.Error(), "larger than 4 bytes") {
		t.Errorf("a file over the limit: %v", err)
	}
	if b, err := filetrust.ReadFile("kubeconfig", f, 5); err != nil || string(b) != "12345" {
		t.Errorf("a file at the limit: %q, %v", b, err)
	}
}
