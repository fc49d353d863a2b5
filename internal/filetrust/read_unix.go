//go:build unix

package filetrust

import (
	"errors"
	"os"
	"syscall"
)

// Open opens a file ipkeeper reads and believes — a kubeconfig, a
// certificate, a key, a token — for reading, when only root or the calling
// user can have chosen its content: every directory and symbolic link on
// the way passes the package's rules (root-owned links such as the
// kubelet's ..data links of a ServiceAccount volume are followed), and the
// file is a regular file owned by root or the caller and not writable by
// group or others. what names the file in messages ("kubeconfig").
//
// The walk looks at each component with Lstat; the file is then opened
// with O_NOFOLLOW (and O_NONBLOCK, so that a FIFO cannot block the call)
// and judged by fstat of the open descriptor. Between the two nobody but
// root or the caller can swap a component: each directory on the way is
// theirs and not writable by others, or sticky, where others cannot
// rename or remove names that root or the caller own.
func Open(what, path string) (*os.File, error) {
	if err := checkPathString(what, path); err != nil {
		return nil, err
	}
	w := walker{what: what, path: path, uid: os.Geteuid()}
	real, err := w.resolve()
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(real, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, w.fail("%s became a symbolic link while it was checked; try again", real)
		}
		return nil, w.fail("%s: %w", real, unwrapPath(err))
	}
	if err := w.checkRead(real, f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// checkRead judges an open file by fstat.
func (w *walker) checkRead(real string, f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return w.fail("%s: %w", real, unwrapPath(err))
	}
	if !fi.Mode().IsRegular() {
		return w.fail("%s is not a regular file (%s)", real, fi.Mode().Type())
	}
	if err := w.checkOwner(real, fi, "file"); err != nil {
		return err
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return w.fail("file %s has mode %04o: other users can write it and so choose what ipkeeper reads; run 'chmod go-w %s'",
			real, perm, real)
	}
	return nil
}
