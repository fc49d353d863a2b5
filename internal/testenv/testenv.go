// Package testenv lets tests say which system commands they run, so that a
// missing prerequisite is a skip on a developer's machine and a failure
// under CI=true, and so that a test (sysdeps_test.go) can hold `make test`
// to installing every command the tests need.
package testenv

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// InCI reports whether the tests run under CI=true, where a missing
// prerequisite must fail a test rather than skip it.
func InCI() bool { return os.Getenv("CI") == "true" }

// Missing skips t, or fails it under CI=true, naming what is missing.
func Missing(t testing.TB, what string) {
	t.Helper()
	if InCI() {
		t.Fatalf("this test needs %s; under CI=true that is a failure, not a skip (make sysdeps installs it)", what)
	}
	t.Skipf("skipping: this test needs %s (make sysdeps installs it)", what)
}

// NeedCommands checks that every named command is on PATH; when one is
// not, it calls Missing. Every name passed here must be installed by the
// Makefile's sysdeps target (TestSysdepsCoverEveryNeededCommand).
func NeedCommands(t testing.TB, names ...string) {
	t.Helper()
	var missing []string
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		Missing(t, strings.Join(missing, ", "))
	}
}

// NeedRoot calls Missing when the test does not run as root.
func NeedRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "root (network namespaces, file ownership)")
	}
}

// FileModes lists every path under root (root included) with its mode, as
// "PATH MODE", in lexical order: what a test compares before and after a
// call that must create or change nothing.
func FileModes(t testing.TB, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		out = append(out, p+" "+fi.Mode().String())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
