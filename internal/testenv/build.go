package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// BuildCommands builds the module's commands pkgs (paths from the module
// root, "./cmd/ipkeeper") into a new temporary directory, each binary
// named after its command's directory, for a TestMain. It returns the
// directory and a func that removes it; on error nothing is left behind.
func BuildCommands(pkgs ...string) (dir string, remove func(), err error) {
	dir, err = os.MkdirTemp("", "ipkeeper-test-bin-")
	if err != nil {
		return "", nil, err
	}
	remove = func() { _ = os.RemoveAll(dir) }
	_, file, _, _ := runtime.Caller(0)
	args := append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		remove()
		return "", nil, fmt.Errorf("go %v: %w\n%s", args, err, out)
	}
	return dir, remove, nil
}
