//go:build !unix

package local

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// PrepareDir creates dir (mode 0700) when missing and returns its absolute
// path. Where there are no unix owners and modes it checks only that the
// path can be a directory; refusals wrap ErrBadPath.
func PrepareDir(what, dir string) (string, error) {
	if err := checkPathString(what, dir); err != nil {
		return "", err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("local: %w: %s %q: %v", ErrBadPath, what, dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return "", fmt.Errorf("local: %w: cannot create %s %s: %v", ErrBadPath, what, abs, err)
	}
	return abs, nil
}

// OpenPrivateFile opens path and refuses anything but a regular file;
// refusals wrap ErrBadPath.
func OpenPrivateFile(what, path string, flag int) (*os.File, error) {
	if err := checkPathString(what, path); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		_ = f.Close()
		return nil, fmt.Errorf("local: %w: %s %s is not a regular file", ErrBadPath, what, path)
	}
	return f, nil
}

func checkPathString(what, p string) error {
	switch {
	case p == "":
		return fmt.Errorf("local: %w: %s is empty; give an absolute path", ErrBadPath, what)
	case strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("local: %w: %s %q contains a NUL byte", ErrBadPath, what, p)
	}
	return nil
}
