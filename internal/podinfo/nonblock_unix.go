//go:build unix

package podinfo

import "syscall"

// nonblock keeps open from blocking on a FIFO planted where a file should be.
const nonblock = syscall.O_NONBLOCK
