//go:build linux

package safefs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// maxLinks bounds how many symbolic links Open follows, like the kernel's
// own limit.
const maxLinks = 40

// Open opens the directory at path, which the caller names on purpose (a
// flag, a mount point), walking it from "/" one component at a time with
// O_NOFOLLOW and resolving links itself:
//
//   - every directory on the way must be owned by root or the caller, and
//     one above the last may be writable by group or others only when it
//     has the sticky bit (like /tmp);
//   - a symbolic link on the way is followed only when it is owned by root
//     or the caller, in such a directory, so only they can have made it
//     (like /var/run -> /run);
//   - the last component must be a directory, not a link, owned by root
//     or the caller and writable by nobody else.
//
// Refusals wrap ErrSymlink, ErrNotDir or ErrUntrusted and name the
// offending path; a missing component is an error wrapping
// fs.ErrNotExist. The Dir's Path is the path with its links resolved.
func Open(path string) (*Dir, error) {
	if path == "" || strings.IndexByte(path, 0) >= 0 {
		return nil, fmt.Errorf("%w: directory %q", ErrBadName, path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	w := &walk{uid: os.Geteuid()}
	if err := w.root(); err != nil {
		return nil, err
	}
	if err := w.check(len(components(abs)) == 0); err != nil {
		w.close()
		return nil, err
	}
	if err := w.run(components(abs)); err != nil {
		w.close()
		return nil, err
	}
	return newDir(w.fd, w.cur), nil
}

// walk is Open's state: fd is the open directory cur.
type walk struct {
	uid   int
	fd    int
	cur   string
	links int
}

func (w *walk) close() { _ = unix.Close(w.fd) }

// root moves the walk to "/".
func (w *walk) root() error {
	fd, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: "/", Err: err}
	}
	if w.cur != "" {
		w.close()
	}
	w.fd, w.cur = fd, "/"
	return nil
}

// enter moves the walk into the directory name of cur (".." included).
func (w *walk) enter(name string) error {
	next := filepath.Join(w.cur, name)
	fd, err := unix.Openat(w.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		var st unix.Stat_t
		if (errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR)) &&
			unix.Fstatat(w.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			return wrongType(next, fileMode(st.Mode), ErrNotDir)
		}
		return &fs.PathError{Op: "open", Path: next, Err: err}
	}
	w.close()
	w.fd, w.cur = fd, next
	return nil
}

// run walks the components rest from cur.
func (w *walk) run(rest []string) error {
	for len(rest) > 0 {
		name := rest[0]
		rest = rest[1:]
		last := len(rest) == 0
		if name != ".." {
			var st unix.Stat_t
			if err := unix.Fstatat(w.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return &fs.PathError{Op: "lstat", Path: filepath.Join(w.cur, name), Err: err}
			}
			if st.Mode&unix.S_IFMT == unix.S_IFLNK {
				target, err := w.follow(name, &st, last)
				if err != nil {
					return err
				}
				rest = append(components(target), rest...)
				continue
			}
		}
		if err := w.enter(name); err != nil {
			return err
		}
		if err := w.check(last); err != nil {
			return err
		}
	}
	return nil
}

// follow checks the link name of cur (st) and returns its target, moving
// the walk to "/" when the target is absolute.
func (w *walk) follow(name string, st *unix.Stat_t, last bool) (string, error) {
	p := filepath.Join(w.cur, name)
	if last {
		return "", fmt.Errorf("%s %w; name the directory it points to", p, ErrSymlink)
	}
	if owner := int(st.Uid); owner != 0 && owner != w.uid {
		return "", fmt.Errorf("%w: symbolic link %s is owned by uid %d, not by root or this user (uid %d), so that user could point it anywhere",
			ErrUntrusted, p, owner, w.uid)
	}
	if w.links++; w.links > maxLinks {
		return "", fmt.Errorf("%s: more than %d symbolic links: %w", p, maxLinks, unix.ELOOP)
	}
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(w.fd, name, buf)
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: p, Err: err}
	}
	target := string(buf[:n])
	if filepath.IsAbs(target) {
		if err := w.root(); err != nil {
			return "", err
		}
	}
	return target, nil
}

// check checks the directory the walk is in: owned by root or the caller,
// and writable by nobody else unless it is not the last one and has the
// sticky bit.
func (w *walk) check(last bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(w.fd, &st); err != nil {
		return &fs.PathError{Op: "stat", Path: w.cur, Err: err}
	}
	if owner := int(st.Uid); owner != 0 && owner != w.uid {
		return fmt.Errorf("%w: directory %s is owned by uid %d, not by root or this user (uid %d), so that user could change it",
			ErrUntrusted, w.cur, owner, w.uid)
	}
	perm := st.Mode & 0o7777
	if perm&0o022 == 0 || !last && perm&unix.S_ISVTX != 0 {
		return nil
	}
	return fmt.Errorf("%w: directory %s is writable by other users (mode %04o), who could plant links in it; run 'chmod go-w %s'",
		ErrUntrusted, w.cur, perm, w.cur)
}

// components splits a path into its names, without empty ones and ".".
func components(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}
