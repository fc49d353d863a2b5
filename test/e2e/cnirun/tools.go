package cnirun

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// ErrNoRepoRoot is returned by RepoRoot outside the ipkeeper module.
var ErrNoRepoRoot = errors.New("cnirun: go.mod of github.com/ipkeeper/ipkeeper not found")

// Upstream tools the tests drive, with the versions the Makefile installs
// into .tools/bin. Keep both lists in step.
var upstreamTools = map[string]string{
	"bridge":     "github.com/containernetworking/plugins/plugins/main/bridge@v1.9.1",
	"loopback":   "github.com/containernetworking/plugins/plugins/main/loopback@v1.9.1",
	"host-local": "github.com/containernetworking/plugins/plugins/ipam/host-local@v1.9.1",
	"cnitool":    "github.com/containernetworking/cni/cnitool@v1.3.1",
}

// RepoRoot walks up from the working directory to the module root.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && containsModuleLine(b) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", ErrNoRepoRoot
		}
		dir = parent
	}
}

func containsModuleLine(gomod []byte) bool {
	const want = "module github.com/ipkeeper/ipkeeper\n"
	return len(gomod) >= len(want) && string(gomod[:len(want)]) == want
}

// EnsureTools makes sure the upstream CNI plugins and cnitool are in
// root/.tools/bin, installing missing ones with `go install` exactly as
// `make tools` does, and returns that directory.
func EnsureTools(ctx context.Context, root string) (string, error) {
	dir := filepath.Join(root, ".tools", "bin")
	for name, pkg := range upstreamTools {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			continue
		}
		cmd := exec.CommandContext(ctx, "go", "install", pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOBIN="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("cnirun: go install %s: %w\n%s", pkg, err, out)
		}
	}
	return dir, nil
}
