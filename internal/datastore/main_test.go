package datastore

import (
	"fmt"
	"os"
	"testing"
)

// TestMain points the node locks and hint files of every test that does
// not choose its own lock directory at a temporary one, not the host's
// DefaultLockDir, and removes it afterwards.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "datastore-locks-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Setenv(LockDirEnv, dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
