//go:build unix

package firstlayout

import (
	"io/fs"
	"os"
	"syscall"
)

// hintOpenFlags make opening a hint file neither follow a symbolic link
// nor wait for a FIFO's writer.
const hintOpenFlags = syscall.O_NOFOLLOW | syscall.O_NONBLOCK

// ownedByCaller reports whether the caller's effective user owns fi.
func ownedByCaller(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}
