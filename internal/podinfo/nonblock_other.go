//go:build !unix

package podinfo

// nonblock is 0 where there are no FIFOs to block on.
const nonblock = 0
