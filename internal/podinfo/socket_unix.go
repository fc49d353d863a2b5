//go:build unix

package podinfo

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// checkSocket refuses an agent socket path that is not a unix socket
// owned by root or this user: another user's socket could answer with
// any pools and addresses.
func checkSocket(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%s is not a unix socket (%s)", path, fi.Mode().Type())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("socket %s is owned by uid %d, not by root or this user (uid %d); not trusting it", path, st.Uid, os.Geteuid())
	}
	return nil
}
