//go:build linux

package plugin

import (
	"errors"
	"fmt"
	"path/filepath"
	"syscall"
)

// netnsGone reports whether the network namespace an earlier sandbox's
// ADD was given at path is provably gone on this node, and why (or why
// not). Gone means: the path does not exist (the runtime removed it, or a
// reboot emptied /run), or it exists but is not a file of the nsfs file
// system, i.e. no namespace is mounted there any more (an unmounted mount
// point left behind; a FIFO, a directory). A path that still is a
// namespace file — even of another kind, even another process's
// /proc/PID/ns/net after a reboot reused the PID — is not gone: it might
// be a live sandbox's. So is a path that cannot be examined (permissions,
// I/O), an empty one, or a relative one (the plugin's working directory is
// not the runtime's). The check is statfs(2) on the path: it opens
// nothing, so it never blocks on a FIFO.
func netnsGone(path string) (bool, string) {
	if path == "" || !filepath.IsAbs(path) {
		return false, fmt.Sprintf("network namespace path %q is not an absolute path", path)
	}
	var fs syscall.Statfs_t
	err := syscall.Statfs(path, &fs)
	switch {
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ENOTDIR):
		return true, fmt.Sprintf("network namespace %s does not exist", path)
	case err != nil:
		return false, fmt.Sprintf("network namespace %s cannot be examined: %v", path, err)
	case fs.Type != nsfsMagic:
		return true, fmt.Sprintf("%s is no namespace any more (not a file of nsfs)", path)
	}
	return false, fmt.Sprintf("network namespace %s still exists", path)
}
