//go:build unix

package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/filetrust"
)

// Listen listens on the unix socket path, mode 0600. Its directory must
// pass the path-trust rules of ipkeeper's other files (filetrust.PrepareDir:
// every directory on the way owned by root or this user and not writable
// by others; missing ones are created 0700). A socket left by an agent
// that is gone is replaced; a socket some process still answers on, or
// anything else at path, is refused.
func Listen(path string) (net.Listener, error) {
	dir, err := filetrust.PrepareDir("agent socket directory", filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	path = filepath.Join(dir, filepath.Base(path))
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("agent socket %s exists and is not a socket (%s); remove it or choose another --socket", path, fi.Mode().Type())
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := (&net.Dialer{}).DialContext(ctx, "unix", path)
		cancel()
		if err == nil {
			_ = c.Close()
			return nil, fmt.Errorf("agent socket %s: another process is listening on it", path)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("agent socket %s: removing the stale socket: %w", path, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("agent socket %s: %w", path, err)
	}
	// The socket is created with the umask's mode: keep it private from
	// the start rather than between bind and chmod.
	old := syscall.Umask(0o177)
	l, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("agent socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("agent socket %s: %w", path, err)
	}
	return l, nil
}
