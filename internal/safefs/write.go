//go:build linux

package safefs

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// WriteFile makes the entry name a regular file holding what r yields,
// with mode perm: it writes a new file beside it (created with O_EXCL and
// O_NOFOLLOW), sets its mode on the descriptor, fsyncs it, calls check
// (when not nil) with it, renames it over name and fsyncs the directory.
// A reader of name sees the old file or the new one, never a part.
//
// An existing name that is not a regular file is refused before anything
// is written: a link with an error wrapping ErrSymlink (it is neither
// followed nor replaced), anything else with one wrapping ErrNotRegular.
// When check or any step fails, name is left as it was and the new file
// is removed.
func (d *Dir) WriteFile(name string, r io.Reader, perm fs.FileMode, check func(*os.File) error) error {
	if _, err := d.StatFile(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	tmp, f, err := d.createTemp(name)
	if err != nil {
		return err
	}
	renamed := false
	defer func() {
		if !renamed {
			_ = d.withFd(func(fd int) error { return unix.Unlinkat(fd, tmp, 0) })
		}
	}()
	if err := fill(f, r, perm, check); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	err = d.withFd(func(fd int) error { return unix.Renameat(fd, tmp, fd, name) })
	if err != nil {
		return &fs.PathError{Op: "rename", Path: d.Join(name), Err: err}
	}
	renamed = true
	return d.sync()
}

// fill writes r into the new file f, sets its mode, fsyncs it and runs
// check.
func fill(f *os.File, r io.Reader, perm fs.FileMode, check func(*os.File) error) error {
	if _, err := io.Copy(f, r); err != nil {
		return fmt.Errorf("write %s: %w", f.Name(), err)
	}
	if err := f.Chmod(perm.Perm()); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if check != nil {
		return check(f)
	}
	return nil
}

// createTemp creates a new file for name, "." + name + "." + random +
// ".tmp", mode 0600 until fill sets perm.
func (d *Dir) createTemp(name string) (string, *os.File, error) {
	if err := d.checkName(name); err != nil {
		return "", nil, err
	}
	for range 10 {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", nil, err
		}
		tmp := "." + name + "." + hex.EncodeToString(b[:]) + ".tmp"
		var nfd int
		err := d.withFd(func(fd int) error {
			var err error
			nfd, err = unix.Openat(fd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
			return err
		})
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return "", nil, &fs.PathError{Op: "create", Path: d.Join(tmp), Err: err}
		}
		return tmp, os.NewFile(uintptr(nfd), d.Join(tmp)), nil
	}
	return "", nil, fmt.Errorf("create a temporary file for %s: %w", d.Join(name), fs.ErrExist)
}
