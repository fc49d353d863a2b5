//go:build linux

package plugin

import (
	"errors"
	"fmt"
	"syscall"
)

// Linux constants for namespace files (linux/magic.h, linux/nsfs.h).
const (
	nsfsMagic   = 0x6e736673 // NSFS_MAGIC: the file system of namespace files
	nsGetNSType = 0xb703     // NS_GET_NSTYPE ioctl
	cloneNewNet = 0x40000000 // CLONE_NEWNET
)

// checkNetNS checks CNI_NETNS for ADD without ever blocking: a path that
// does not exist passes (skel treats it so too), anything else must be a
// network namespace file other than the plugin's own. A FIFO, a device, a
// directory, a regular file or another kind of namespace fails at once,
// before the plugin acts. The errors wrap errArgs, except for the plugin's
// own namespace (errOwnNetNS).
func checkNetNS(path string) error {
	if path == "" {
		return nil
	}
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return nil
		}
		return netnsError(path, "cannot be examined: %v", err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return netnsError(path, "is %s, not a network namespace", fileKind(st.Mode))
	}
	// A regular file cannot block open; O_NONBLOCK covers a path swapped
	// for a FIFO since the stat.
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC|syscall.O_NOCTTY, 0)
	if err != nil {
		return netnsError(path, "cannot be opened: %v", err)
	}
	defer syscall.Close(fd)
	var fs syscall.Statfs_t
	if err := syscall.Fstatfs(fd, &fs); err != nil {
		return netnsError(path, "cannot be examined: %v", err)
	}
	if fs.Type != nsfsMagic {
		return netnsError(path, "is a regular file, not a network namespace (want a file of the nsfs file system, e.g. /var/run/netns/NAME or /proc/PID/ns/net)")
	}
	if t, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), nsGetNSType, 0); errno == 0 && t != cloneNewNet {
		return netnsError(path, "is a namespace of another kind, not a network namespace")
	}
	if err := syscall.Fstat(fd, &st); err != nil {
		return netnsError(path, "cannot be examined: %v", err)
	}
	var own syscall.Stat_t
	if err := syscall.Stat("/proc/thread-self/ns/net", &own); err != nil {
		return netnsError(path, "cannot be compared with the plugin's own network namespace: %v", err)
	}
	if st.Dev == own.Dev && st.Ino == own.Ino {
		return fmt.Errorf("%w: CNI_NETNS %q is the plugin's own network namespace; the container needs a network namespace of its own",
			errOwnNetNS, path)
	}
	return nil
}

// netnsError is a CNI_NETNS error (code 4) naming the path.
func netnsError(path, format string, args ...any) error {
	return fmt.Errorf("%w: CNI_NETNS %q %s", errArgs, path, fmt.Sprintf(format, args...))
}

// fileKind names a file type for messages.
func fileKind(mode uint32) string {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFIFO:
		return "a FIFO"
	case syscall.S_IFCHR:
		return "a character device"
	case syscall.S_IFBLK:
		return "a block device"
	case syscall.S_IFDIR:
		return "a directory"
	case syscall.S_IFSOCK:
		return "a socket"
	default:
		return "not a regular file"
	}
}
