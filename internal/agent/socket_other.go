//go:build !unix

package agent

import (
	"errors"
	"net"
)

// Listen is unix-only.
func Listen(string) (net.Listener, error) {
	return nil, errors.New("ipkeeper-agent needs unix sockets")
}
