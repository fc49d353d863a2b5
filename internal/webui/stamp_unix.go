//go:build unix

package webui

import (
	"os"
	"syscall"
)

// inode is the file's inode number: a replaced file is a change even when
// its time and size look the same.
func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino)
	}
	return 0
}
