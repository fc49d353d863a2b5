//go:build linux

// Package safefs works, as root, in directories that others can write to
// (the host's CNI dirs mounted into a container, which other programs
// running as root also write) without ever following a symbolic link it
// did not create.
//
// A Dir is an open directory. Its methods take the name of one entry of
// it, never a path, and run relative to the directory's descriptor
// (openat, fstatat, mkdirat, renameat, unlinkat): a directory moved or
// replaced after it was opened redirects nothing, and no method follows a
// symbolic link in the entry it names. Where a method needs a file or a
// directory and finds a link, it fails with an error wrapping ErrSymlink
// that names the link, and changes nothing. Files are written whole beside
// their target and renamed over it, so nothing is ever written through an
// existing file, and their mode is set on the descriptor (fchmod).
//
// Open is the one way in from a path: it walks the path from "/" itself,
// follows only links that nobody but root or the caller can have made,
// and refuses a path whose last component is a link.
package safefs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Errors wrapped by the refusals of this package. Each refusal names the
// offending path.
var (
	// ErrSymlink: an entry is a symbolic link where a file or a
	// directory is needed.
	ErrSymlink = errors.New("is a symbolic link; refusing to follow it")
	// ErrNotRegular: an entry is something other than a regular file
	// where one is needed.
	ErrNotRegular = errors.New("not a regular file")
	// ErrNotDir: an entry is something other than a directory where one
	// is needed.
	ErrNotDir = errors.New("not a directory")
	// ErrUntrusted: a directory or link is owned by a user other than
	// root or the caller, or a directory can be written by such users.
	ErrUntrusted = errors.New("untrusted path")
	// ErrBadName: a name given for an entry is not a single path
	// component.
	ErrBadName = errors.New("not a file name")
)

// Dir is an open directory. Its methods are safe for concurrent use;
// Close ends them.
type Dir struct {
	f    *os.File
	path string
}

func newDir(fd int, path string) *Dir {
	return &Dir{f: os.NewFile(uintptr(fd), path), path: path}
}

// Path is the directory's path when it was opened, for messages.
func (d *Dir) Path() string { return d.path }

// Join is the path of the entry name, for messages.
func (d *Dir) Join(name string) string { return filepath.Join(d.path, name) }

// Close closes the directory.
func (d *Dir) Close() error { return d.f.Close() }

// withFd runs fn with the directory's descriptor, which stays open while
// fn runs.
func (d *Dir) withFd(fn func(fd int) error) error {
	rc, err := d.f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// Stat describes the directory itself. Its Sys is a *unix.Stat_t.
func (d *Dir) Stat() (fs.FileInfo, error) {
	var st unix.Stat_t
	err := d.withFd(func(fd int) error { return unix.Fstat(fd, &st) })
	if err != nil {
		return nil, &fs.PathError{Op: "stat", Path: d.path, Err: err}
	}
	return &fileInfo{name: filepath.Base(d.path), st: st}, nil
}

// Chmod sets the directory's permission bits, on its descriptor.
func (d *Dir) Chmod(perm fs.FileMode) error {
	return d.f.Chmod(perm.Perm())
}

// Lstat describes the entry name without following it. Its Sys is a
// *unix.Stat_t. A missing entry is an error wrapping fs.ErrNotExist.
func (d *Dir) Lstat(name string) (fs.FileInfo, error) {
	if err := d.checkName(name); err != nil {
		return nil, err
	}
	var st unix.Stat_t
	err := d.withFd(func(fd int) error { return unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) })
	if err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: d.Join(name), Err: err}
	}
	return &fileInfo{name: name, st: st}, nil
}

// StatFile is Lstat that accepts only a regular file: a link is an error
// wrapping ErrSymlink, anything else but a regular file one wrapping
// ErrNotRegular, a missing entry one wrapping fs.ErrNotExist.
func (d *Dir) StatFile(name string) (fs.FileInfo, error) {
	fi, err := d.Lstat(name)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, d.wrongType(name, fi.Mode(), ErrNotRegular)
	}
	return fi, nil
}

// Names lists the directory's entries (without "." and ".."), sorted.
func (d *Dir) Names() ([]string, error) {
	var nfd int
	err := d.withFd(func(fd int) error {
		var err error
		nfd, err = unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: d.path, Err: err}
	}
	f := os.NewFile(uintptr(nfd), d.path)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	return names, nil
}

// OpenDir opens the directory name without following a link: a link is
// an error wrapping ErrSymlink, anything but a directory one wrapping
// ErrNotDir, and a directory owned by a user other than root or the
// caller one wrapping ErrUntrusted. Its mode is not checked: a caller that
// owns the directory sets it with Chmod.
func (d *Dir) OpenDir(name string) (*Dir, error) {
	if err := d.checkName(name); err != nil {
		return nil, err
	}
	var nfd int
	err := d.withFd(func(fd int) error {
		var err error
		nfd, err = unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return nil, d.openError(name, err, ErrNotDir)
	}
	sub := newDir(nfd, d.Join(name))
	fi, err := sub.Stat()
	if err == nil {
		err = checkOwner(sub.path, "directory", fi)
	}
	if err != nil {
		_ = sub.Close()
		return nil, err
	}
	return sub, nil
}

// Mkdir creates the directory name with perm (less the umask). An
// existing entry of any kind, a link included, is an error wrapping
// fs.ErrExist.
func (d *Dir) Mkdir(name string, perm fs.FileMode) error {
	if err := d.checkName(name); err != nil {
		return err
	}
	err := d.withFd(func(fd int) error { return unix.Mkdirat(fd, name, uint32(perm.Perm())) })
	if err != nil {
		return &fs.PathError{Op: "mkdir", Path: d.Join(name), Err: err}
	}
	return d.sync()
}

// OpenFile opens the regular file name for reading without following a
// link and without blocking on a FIFO or device: a link is an error
// wrapping ErrSymlink, anything but a regular file one wrapping
// ErrNotRegular.
func (d *Dir) OpenFile(name string) (*os.File, error) {
	if err := d.checkName(name); err != nil {
		return nil, err
	}
	var nfd int
	err := d.withFd(func(fd int) error {
		var err error
		nfd, err = unix.Openat(fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return nil, d.openError(name, err, ErrNotRegular)
	}
	var st unix.Stat_t
	if err := unix.Fstat(nfd, &st); err != nil {
		_ = unix.Close(nfd)
		return nil, &fs.PathError{Op: "stat", Path: d.Join(name), Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		_ = unix.Close(nfd)
		return nil, d.wrongType(name, fileMode(st.Mode), ErrNotRegular)
	}
	if err := unix.SetNonblock(nfd, false); err != nil {
		_ = unix.Close(nfd)
		return nil, err
	}
	return os.NewFile(uintptr(nfd), d.Join(name)), nil
}

// Remove removes the regular file name. A link is not removed but refused
// (ErrSymlink), as is anything else but a regular file (ErrNotRegular); a
// missing entry is an error wrapping fs.ErrNotExist.
func (d *Dir) Remove(name string) error {
	if _, err := d.StatFile(name); err != nil {
		return err
	}
	err := d.withFd(func(fd int) error { return unix.Unlinkat(fd, name, 0) })
	if err != nil {
		return &fs.PathError{Op: "remove", Path: d.Join(name), Err: err}
	}
	return d.sync()
}

// RemoveDir removes the empty directory name. A link is not removed but
// refused (ErrSymlink), as is anything else but a directory (ErrNotDir).
func (d *Dir) RemoveDir(name string) error {
	fi, err := d.Lstat(name)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return d.wrongType(name, fi.Mode(), ErrNotDir)
	}
	err = d.withFd(func(fd int) error { return unix.Unlinkat(fd, name, unix.AT_REMOVEDIR) })
	if err != nil {
		return &fs.PathError{Op: "remove", Path: d.Join(name), Err: err}
	}
	return d.sync()
}

// sync flushes the directory's entries to disk.
func (d *Dir) sync() error {
	if err := d.f.Sync(); err != nil {
		return &fs.PathError{Op: "sync", Path: d.path, Err: errors.Unwrap(err)}
	}
	return nil
}

// checkName refuses a name that is not a single component: openat and
// friends would walk "a/b" through a link at "a".
func (d *Dir) checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') || strings.IndexByte(name, 0) >= 0 {
		return fmt.Errorf("%w: %q in %s", ErrBadName, name, d.path)
	}
	return nil
}

// openError turns the error of an O_NOFOLLOW open of name into one that
// says what is there instead of the wanted kind (want).
func (d *Dir) openError(name string, err error, want error) error {
	var st unix.Stat_t
	serr := d.withFd(func(fd int) error { return unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) })
	if serr == nil && (errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ENXIO)) {
		return d.wrongType(name, fileMode(st.Mode), want)
	}
	return &fs.PathError{Op: "open", Path: d.Join(name), Err: err}
}

// wrongType is the refusal of the entry name of mode where want was needed.
func (d *Dir) wrongType(name string, mode fs.FileMode, want error) error {
	return wrongType(d.Join(name), mode, want)
}

func wrongType(path string, mode fs.FileMode, want error) error {
	if mode&fs.ModeSymlink != 0 {
		return fmt.Errorf("%s %w", path, ErrSymlink)
	}
	return fmt.Errorf("%s is %s, %w", path, kind(mode), want)
}

// kind names a file's type for messages.
func kind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "a special file"
}

// Owner is the owner's uid of a FileInfo of this package or of package os,
// -1 when it has none.
func Owner(fi fs.FileInfo) int {
	switch st := fi.Sys().(type) {
	case *unix.Stat_t:
		return int(st.Uid)
	case *syscall.Stat_t:
		return int(st.Uid)
	}
	return -1
}

// checkOwner refuses what is owned by neither root nor the caller.
func checkOwner(path, what string, fi fs.FileInfo) error {
	uid := os.Geteuid()
	if owner := Owner(fi); owner != 0 && owner != uid {
		return fmt.Errorf("%w: %s %s is owned by uid %d, not by root or this user (uid %d), so that user could change it",
			ErrUntrusted, what, path, owner, uid)
	}
	return nil
}

// fileInfo is an fs.FileInfo from a unix.Stat_t.
type fileInfo struct {
	name string
	st   unix.Stat_t
}

func (fi *fileInfo) Name() string       { return fi.name }
func (fi *fileInfo) Size() int64        { return fi.st.Size }
func (fi *fileInfo) Mode() fs.FileMode  { return fileMode(fi.st.Mode) }
func (fi *fileInfo) ModTime() time.Time { return time.Unix(fi.st.Mtim.Unix()) }
func (fi *fileInfo) IsDir() bool        { return fi.Mode().IsDir() }
func (fi *fileInfo) Sys() any           { return &fi.st }

// fileMode converts a stat mode to an fs.FileMode.
func fileMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= fs.ModeSocket
	case unix.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		mode |= fs.ModeDevice
	}
	if m&unix.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}
