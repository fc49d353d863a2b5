//go:build unix

package local

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// maxSymlinks bounds how many symbolic links PrepareDir follows, like the
// kernel's own limit.
const maxSymlinks = 40

// PrepareDir makes dir usable for files that only root or the calling user
// may change, and returns its path with every symbolic link resolved.
//
// It walks the path from "/" without trusting anything on the way: every
// existing directory and symbolic link must be owned by root or the caller;
// a directory above dir may be writable by group or others only when it
// has the sticky bit (like /tmp, where nobody else can rename what the
// caller owns); dir itself must not be writable by group or others at all.
// Missing directories are created with mode 0700, and only once the whole
// existing part of the path has passed, so a refused path creates nothing.
// what names the directory in messages ("datastore directory").
//
// Every refusal wraps ErrBadPath and names the offending path and the fix.
func PrepareDir(what, dir string) (string, error) {
	if err := checkPathString(what, dir); err != nil {
		return "", err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("local: %w: %s %q: %v", ErrBadPath, what, dir, err)
	}
	uid := os.Geteuid()
	cur := "/"
	if err := checkDir(what, cur, uid, false); err != nil {
		return "", err
	}
	rest := splitPath(abs)
	links := 0
	for len(rest) > 0 {
		name := rest[0]
		rest = rest[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) {
			if err := os.Mkdir(next, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return "", fmt.Errorf("local: %w: cannot create %s %s: %v", ErrBadPath, what, next, unwrapPath(err))
			}
			if fi, err = os.Lstat(next); err != nil {
				return "", fmt.Errorf("local: %w: %s %s: %v", ErrBadPath, what, next, unwrapPath(err))
			}
		} else if err != nil {
			return "", fmt.Errorf("local: %w: %s %s: %v", ErrBadPath, what, next, unwrapPath(err))
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if err := checkOwner(what, next, fi, uid, "symbolic link"); err != nil {
				return "", err
			}
			if links++; links > maxSymlinks {
				return "", fmt.Errorf("local: %w: %s %s: more than %d symbolic links", ErrBadPath, what, dir, maxSymlinks)
			}
			target, err := os.Readlink(next)
			if err != nil {
				return "", fmt.Errorf("local: %w: %s %s: %v", ErrBadPath, what, next, unwrapPath(err))
			}
			if filepath.IsAbs(target) {
				cur = "/"
			}
			rest = append(splitPath(target), rest...)
			continue
		}
		if !fi.IsDir() {
			return "", fmt.Errorf("local: %w: %s %s: %s is not a directory; choose a path of directories only", ErrBadPath, what, dir, next)
		}
		if err := checkDir(what, next, uid, len(rest) > 0); err != nil {
			return "", err
		}
		cur = next
	}
	return cur, nil
}

// checkDir checks one directory of a path: owned by root or uid, and not
// writable by group or others unless it lies above the target (above) and
// has the sticky bit.
func checkDir(what, path string, uid int, above bool) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("local: %w: %s %s: %v", ErrBadPath, what, path, unwrapPath(err))
	}
	if err := checkOwner(what, path, fi, uid, "directory"); err != nil {
		return err
	}
	perm := fi.Mode().Perm()
	if perm&0o022 == 0 || above && fi.Mode()&fs.ModeSticky != 0 {
		return nil
	}
	return fmt.Errorf("local: %w: %s: directory %s is writable by other users (mode %04o), who could replace what ipkeeper keeps there; run 'chmod go-w %s' or choose another path",
		ErrBadPath, what, path, perm|stickyBits(fi.Mode()), path)
}

func stickyBits(m fs.FileMode) fs.FileMode {
	if m&fs.ModeSticky != 0 {
		return 0o1000
	}
	return 0
}

// checkOwner refuses a file not owned by root or uid.
func checkOwner(what, path string, fi fs.FileInfo, uid int, kind string) error {
	owner := ownerOf(fi)
	if owner == 0 || owner == uid {
		return nil
	}
	fix := fmt.Sprintf("run 'chown %d %s' if it is yours, or choose another path", uid, path)
	if kind == "symbolic link" {
		fix = fmt.Sprintf("remove it ('rm %s') or choose another path", path)
	}
	return fmt.Errorf("local: %w: %s: %s %s is owned by uid %d, not by root or this user (uid %d), so that user could change it; %s",
		ErrBadPath, what, kind, path, owner, uid, fix)
}

func ownerOf(fi fs.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}

// OpenPrivateFile opens (creating with mode 0600 when flag has O_CREATE) a
// file that only root or the calling user may change: it never follows a
// symbolic link in the last component, never blocks on a FIFO or device,
// and refuses anything but a regular file owned by root or the caller with
// one link. An existing file that group or others may read or write is
// made 0600 when the caller owns it and refused otherwise. The directory
// must have passed PrepareDir. Refusals wrap ErrBadPath and name the fix.
func OpenPrivateFile(what, path string, flag int) (*os.File, error) {
	if err := checkPathString(what, path); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.EMLINK) {
			return nil, fmt.Errorf("local: %w: %s %s is a symbolic link, which could point anywhere; remove it ('rm %s')", ErrBadPath, what, path, path)
		}
		if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.ENXIO) {
			return nil, fmt.Errorf("local: %w: %s %s: %v; it must be a regular file", ErrBadPath, what, path, unwrapPath(err))
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
		return fmt.Errorf("local: %w: %s %s is not a regular file (%s); remove it ('rm %s')", ErrBadPath, what, path, fi.Mode().Type(), path)
	}
	uid := os.Geteuid()
	if err := checkOwner(what, path, fi, uid, "file"); err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
		return fmt.Errorf("local: %w: %s %s has %d hard links, so another name could change it; remove the other links or copy the file ('cp %s x && mv x %s')",
			ErrBadPath, what, path, st.Nlink, path, path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		if ownerOf(fi) != uid {
			return fmt.Errorf("local: %w: %s %s has mode %04o, open to other users; run 'chmod 600 %s'", ErrBadPath, what, path, perm, path)
		}
		if err := f.Chmod(0o600); err != nil {
			return fmt.Errorf("local: %w: %s %s has mode %04o and cannot be made 0600: %v", ErrBadPath, what, path, perm, unwrapPath(err))
		}
	}
	return nil
}

// checkPathString refuses paths no file system call can take.
func checkPathString(what, p string) error {
	switch {
	case p == "":
		return fmt.Errorf("local: %w: %s is empty; give an absolute path", ErrBadPath, what)
	case strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("local: %w: %s %q contains a NUL byte", ErrBadPath, what, p)
	}
	return nil
}

func splitPath(p string) []string {
	return strings.Split(filepath.ToSlash(p), "/")
}

// unwrapPath drops the *PathError's op and path, which messages already say.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
