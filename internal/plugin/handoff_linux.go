package plugin

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// execWithStdin replaces this process by path with the same arguments,
// the environment env and stdin as its standard input: stdin is written to a
// memory file that becomes file descriptor 0 (the plugin already read the
// runtime's pipe).
func execWithStdin(path string, stdin []byte, env []string) error {
	fd, err := unix.MemfdCreate("ipkeeper-stdin", unix.MFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("%w: handing off to %s: %w", errIO, path, err)
	}
	f := os.NewFile(uintptr(fd), "ipkeeper-stdin")
	defer f.Close()
	if _, err := f.Write(stdin); err != nil {
		return fmt.Errorf("%w: handing off to %s: %w", errIO, path, err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		return fmt.Errorf("%w: handing off to %s: %w", errIO, path, err)
	}
	// Dup3 without O_CLOEXEC: the copy survives the exec.
	if err := unix.Dup3(fd, 0, 0); err != nil {
		return fmt.Errorf("%w: handing off to %s: %w", errIO, path, err)
	}
	args := append([]string{path}, os.Args[1:]...)
	if err := unix.Exec(path, args, env); err != nil {
		return fmt.Errorf("%w: running %s: %w", errNoKubeBinary, path, err)
	}
	return nil
}
