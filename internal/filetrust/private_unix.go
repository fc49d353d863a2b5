//go:build unix

package filetrust

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// PrepareDir makes dir usable for files that only root or the calling user
// may change, and returns its path with every symbolic link resolved.
//
// It walks the path from "/" under the package's rules; dir itself must
// not be writable by group or others even with the sticky bit. Missing
// directories are created with mode 0700, and only once the whole existing
// part of the path has passed, so a refused path creates nothing. what
// names the directory in messages ("datastore directory").
func PrepareDir(what, dir string) (string, error) {
	if err := checkPathString(what, dir); err != nil {
		return "", err
	}
	w := walker{what: what, path: dir, uid: os.Geteuid(), dir: true}
	return w.resolve()
}

// OpenPrivateFile opens (creating with mode 0600 when flag has O_CREATE) a
// file that only root or the calling user may change: it never follows a
// symbolic link in the last component, never blocks on a FIFO or device,
// and refuses anything but a regular file owned by root or the caller with
// one link. An existing file that group or others may read or write is
// made 0600 when the caller owns it and refused otherwise. The directory
// must have passed PrepareDir.
func OpenPrivateFile(what, path string, flag int) (*os.File, error) {
	if err := checkPathString(what, path); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.EMLINK) {
			return nil, fmt.Errorf("%w: %s %s is a symbolic link, which could point anywhere; remove it ('rm %s')", ErrUnsafe, what, path, path)
		}
		if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.ENXIO) {
			return nil, fmt.Errorf("%w: %s %s: %w; it must be a regular file", ErrUnsafe, what, path, unwrapPath(err))
		}
		return nil, err
	}
	if err := checkPrivate(what, path, f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

func checkPrivate(what, path string, f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %s %s is not a regular file (%s); remove it ('rm %s')", ErrUnsafe, what, path, fi.Mode().Type(), path)
	}
	w := walker{what: what, path: path, uid: os.Geteuid()}
	if err := w.checkOwner(path, fi, "file"); err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
		return fmt.Errorf("%w: %s %s has %d hard links, so another name could change it; remove the other links or copy the file ('cp %s x && mv x %s')",
			ErrUnsafe, what, path, st.Nlink, path, path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		if ownerOf(fi) != w.uid {
			return fmt.Errorf("%w: %s %s has mode %04o, open to other users; run 'chmod 600 %s'", ErrUnsafe, what, path, perm, path)
		}
		if err := f.Chmod(0o600); err != nil {
			return fmt.Errorf("%w: %s %s has mode %04o and cannot be made 0600: %w", ErrUnsafe, what, path, perm, unwrapPath(err))
		}
	}
	return nil
}
