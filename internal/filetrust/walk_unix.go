//go:build unix

package filetrust

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// maxSymlinks bounds how many symbolic links a walk follows, like the
// kernel's own limit.
const maxSymlinks = 40

// walker resolves a path from "/" without trusting anything on the way
// (the package's rules), following only symbolic links owned by root or
// uid.
type walker struct {
	what, path string // what the path is, and the path as given, for messages
	uid        int
	// dir: the target is a directory ipkeeper keeps files in, which must
	// not be writable by group or others even with the sticky bit; missing
	// directories are created (mode 0700) once the existing part of the
	// path has passed. Otherwise the target is a file to read: nothing is
	// created, and the last component is returned unopened.
	dir bool
}

// fail is a refusal about w's path.
func (w *walker) fail(format string, args ...any) error {
	return fmt.Errorf("%w: %s %s: "+format, append([]any{ErrUnsafe, w.what, w.path}, args...)...)
}

// resolve returns the path with every symbolic link resolved: the target
// directory (dir), or the last component, which is no directory and no
// symbolic link when it was looked at (file).
func (w *walker) resolve() (string, error) {
	abs, err := filepath.Abs(w.path)
	if err != nil {
		return "", w.fail("%w", err)
	}
	cur := "/"
	fi, err := os.Lstat(cur)
	if err != nil {
		return "", w.fail("/: %w", unwrapPath(err))
	}
	if err := w.checkDir(cur, fi, false); err != nil {
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
		if errors.Is(err, fs.ErrNotExist) && w.dir {
			if err := os.Mkdir(next, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return "", fmt.Errorf("%w: cannot create %s %s: %w", ErrUnsafe, w.what, next, unwrapPath(err))
			}
			fi, err = os.Lstat(next)
		}
		if err != nil {
			return "", w.fail("%s: %w", next, unwrapPath(err))
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if err := w.checkOwner(next, fi, "symbolic link"); err != nil {
				return "", err
			}
			if links++; links > maxSymlinks {
				return "", w.fail("more than %d symbolic links", maxSymlinks)
			}
			target, err := os.Readlink(next)
			if err != nil {
				return "", w.fail("%s: %w", next, unwrapPath(err))
			}
			if filepath.IsAbs(target) {
				cur = "/"
			}
			rest = append(splitPath(target), rest...)
			continue
		}
		last := onlyDots(rest)
		if !fi.IsDir() {
			if last && !w.dir {
				return next, nil
			}
			return "", w.fail("%s is not a directory; choose a path of directories only", next)
		}
		if err := w.checkDir(next, fi, !last || !w.dir); err != nil {
			return "", err
		}
		cur = next
	}
	if !w.dir {
		return "", w.fail("%s is a directory, not a file", cur)
	}
	return cur, nil
}

// onlyDots reports whether no name is left in rest.
func onlyDots(rest []string) bool {
	for _, n := range rest {
		if n != "" && n != "." {
			return false
		}
	}
	return true
}

// checkDir checks one directory: owned by root or uid, and not writable by
// group or others unless it has the sticky bit and sticky is allowed (a
// directory above the target, or any directory holding a file to read).
func (w *walker) checkDir(path string, fi fs.FileInfo, sticky bool) error {
	if err := w.checkOwner(path, fi, "directory"); err != nil {
		return err
	}
	perm := fi.Mode().Perm()
	if perm&0o022 == 0 || sticky && fi.Mode()&fs.ModeSticky != 0 {
		return nil
	}
	return w.fail("directory %s is writable by other users (mode %04o), who could replace what is in it; run 'chmod go-w %s' or choose another path",
		path, perm|stickyBits(fi.Mode()), path)
}

func stickyBits(m fs.FileMode) fs.FileMode {
	if m&fs.ModeSticky != 0 {
		return 0o1000
	}
	return 0
}

// checkOwner refuses a file, directory or link not owned by root or uid.
func (w *walker) checkOwner(path string, fi fs.FileInfo, kind string) error {
	owner := ownerOf(fi)
	if owner == 0 || owner == w.uid {
		return nil
	}
	fix := fmt.Sprintf("run 'chown %d %s' if it is yours, or choose another path", w.uid, path)
	if kind == "symbolic link" {
		fix = fmt.Sprintf("remove it ('rm %s') or choose another path", path)
	}
	return w.fail("%s %s is owned by uid %d, not by root or this user (uid %d), so that user could change it; %s",
		kind, path, owner, w.uid, fix)
}

func ownerOf(fi fs.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}
