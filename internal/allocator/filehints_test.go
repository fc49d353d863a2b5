//go:build unix

package allocator_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/kv"
)

// hangBound is how long a hint load may take before the test calls it a
// hang. It bounds the test, it does not measure the code.
const hangBound = 30 * time.Second

// loadBounded loads node's hint, failing the test when Load does not
// return: a hint file must never block the plugin.
func loadBounded(t *testing.T, c allocator.FileHints, node string) bool {
	t.Helper()
	done := make(chan bool, 1)
	go func() {
		_, ok := c.Load(node)
		done <- ok
	}()
	select {
	case ok := <-done:
		return ok
	case <-time.After(hangBound):
		t.Fatalf("Load(%s) blocked", node)
		return false
	}
}

// A hint file that is not a regular file the caller owns, of bounded size,
// is no hint: a link (to a FIFO, to a valid hint elsewhere), a FIFO, a
// directory, an oversized file, a file owned by another user. None blocks.
// Store replaces a planted link rather than writing through it.
func TestFileHintsRefuseSpecialFiles(t *testing.T) {
	valid := allocator.Hint{Entries: []kv.KeyValue{{Key: "blocks/p/10.0.0.0-26", Value: []byte(`{}`), Version: 3}}}
	for _, c := range []struct {
		name  string
		root  bool
		plant func(t *testing.T, dir, file string)
	}{
		{"symbolic link to a FIFO", false, func(t *testing.T, dir, file string) {
			fifo := filepath.Join(t.TempDir(), "fifo")
			mustAll(t, syscall.Mkfifo(fifo, 0o600), os.Symlink(fifo, file))
		}},
		{"FIFO", false, func(t *testing.T, dir, file string) {
			mustAll(t, syscall.Mkfifo(file, 0o600))
		}},
		{"symbolic link to a valid hint", false, func(t *testing.T, dir, file string) {
			other := allocator.FileHints{Dir: t.TempDir()}
			other.Store("node-a", valid)
			mustAll(t, os.Symlink(filepath.Join(other.Dir, filepath.Base(file)), file))
		}},
		{"directory", false, func(t *testing.T, dir, file string) {
			mustAll(t, os.Mkdir(file, 0o700))
		}},
		{"oversized file", false, func(t *testing.T, dir, file string) {
			allocator.FileHints{Dir: dir}.Store("node-a", valid)
			f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND, 0)
			mustAll(t, err)
			_, err = f.Write([]byte(strings.Repeat(" ", allocator.MaxHintFileBytes)))
			mustAll(t, err, f.Close())
		}},
		{"file owned by another user", true, func(t *testing.T, dir, file string) {
			allocator.FileHints{Dir: dir}.Store("node-a", valid)
			mustAll(t, os.Chown(file, 65534, 65534))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.root {
				needRootForPlant(t)
			}
			dir := t.TempDir()
			hints := allocator.FileHints{Dir: dir}
			// The file name Store uses for node-a.
			hints.Store("node-a", valid)
			files, _ := filepath.Glob(filepath.Join(dir, "hint-*"))
			if len(files) != 1 || !loadBounded(t, hints, "node-a") {
				t.Fatalf("a stored hint is not loaded (files %v)", files)
			}
			mustAll(t, os.Remove(files[0]))
			c.plant(t, dir, files[0])
			if loadBounded(t, hints, "node-a") {
				t.Fatal("Load took a planted file as a hint")
			}
		})
	}

	t.Run("Store replaces a planted link", func(t *testing.T) {
		dir := t.TempDir()
		hints := allocator.FileHints{Dir: dir}
		hints.Store("node-a", valid)
		files, _ := filepath.Glob(filepath.Join(dir, "hint-*"))
		target := filepath.Join(t.TempDir(), "precious")
		mustAll(t, os.WriteFile(target, []byte("precious"), 0o600), os.Remove(files[0]), os.Symlink(target, files[0]))
		hints.Store("node-a", valid)
		if b, _ := os.ReadFile(target); string(b) != "precious" {
			t.Fatalf("Store wrote through a link: %q", b)
		}
		if fi, err := os.Lstat(files[0]); err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("hint file after Store: %v, %v", fi, err)
		}
	})
}

func mustAll(t *testing.T, errs ...error) {
	t.Helper()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// needRootForPlant skips a test that must plant files owned by another user,
// except under CI=true, where a missing privilege is a failure.
func needRootForPlant(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("this test plants files owned by another user and needs root (CI=true)")
	}
	t.Skip("needs root to plant files owned by another user")
}
