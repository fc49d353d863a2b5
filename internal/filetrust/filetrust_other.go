//go:build !unix

package filetrust

import (
	"fmt"
	"os"
	"path/filepath"
)

// PrepareDir creates dir (mode 0700) when missing and returns its absolute
// path. Where there are no unix owners and modes it checks only that the
// path can be a directory.
func PrepareDir(what, dir string) (string, error) {
	if err := checkPathString(what, dir); err != nil {
		return "", err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("%w: %s %q: %w", ErrUnsafe, what, dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return "", fmt.Errorf("%w: cannot create %s %s: %w", ErrUnsafe, what, abs, err)
	}
	return abs, nil
}

// OpenPrivateFile opens path and refuses anything but a regular file.
func OpenPrivateFile(what, path string, flag int) (*os.File, error) {
	if err := checkPathString(what, path); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		return nil, err
	}
	return regular(what, path, f)
}

// Open opens path to read and refuses anything but a regular file.
func Open(what, path string) (*os.File, error) {
	if err := checkPathString(what, path); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %s: %w", ErrUnsafe, what, path, unwrapPath(err))
	}
	return regular(what, path, f)
}

func regular(what, path string, f *os.File) (*os.File, error) {
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		_ = f.Close()
		return nil, fmt.Errorf("%w: %s %s is not a regular file", ErrUnsafe, what, path)
	}
	return f, nil
}
