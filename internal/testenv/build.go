package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// ModuleRoot is the directory of the module's go.mod.
func ModuleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Build runs `go build -o outDir/ pkgs...` in the module root (pkgs are
// paths from it, "./cmd/ipkeeper"): each binary lands in outDir named
// after its command's directory.
func Build(ctx context.Context, outDir string, pkgs ...string) error {
	args := append([]string{"build", "-o", outDir + string(filepath.Separator)}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = ModuleRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %v: %w\n%s", args, err, out)
	}
	return nil
}

// BuildCommands builds the module's commands pkgs into a new temporary
// directory, for a TestMain. It returns the directory and a func that
// removes it; on error nothing is left behind.
func BuildCommands(pkgs ...string) (dir string, remove func(), err error) {
	dir, err = os.MkdirTemp("", "ipkeeper-test-bin-")
	if err != nil {
		return "", nil, err
	}
	remove = func() { _ = os.RemoveAll(dir) }
	if err := Build(context.Background(), dir, pkgs...); err != nil {
		remove()
		return "", nil, err
	}
	return dir, remove, nil
}
