//go:build !unix

package webui

import "os"

// inode is 0 where the platform does not tell: time and size decide.
func inode(os.FileInfo) uint64 { return 0 }
