package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/kubetest"
)

// binDir holds the binaries the tests build (removed after the run).
var binDir string

var (
	buildMu  sync.Mutex
	built    = map[string]error{}
	rootOnce sync.Once
	rootDir  string
	rootErr  error
)

// moduleRoot is the repository root.
func moduleRoot(t *testing.T) string {
	t.Helper()
	rootOnce.Do(func() { rootDir, rootErr = kubetest.ModuleRoot() })
	if rootErr != nil {
		t.Fatal(rootErr)
	}
	return rootDir
}

// static builds ./cmd/<name> (or another package dir relative to the
// root) once, statically (CGO_ENABLED=0) as the image ships it, and
// returns the binary's path.
func static(t *testing.T, pkg string) string {
	t.Helper()
	root := moduleRoot(t)
	out := filepath.Join(binDir, filepath.Base(pkg))
	buildMu.Lock()
	defer buildMu.Unlock()
	err, done := built[pkg]
	if !done {
		cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./"+pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, e := cmd.CombinedOutput(); e != nil {
			err = &buildError{pkg: pkg, out: string(b), err: e}
		}
		built[pkg] = err
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

type buildError struct {
	pkg, out string
	err      error
}

func (e *buildError) Error() string {
	return "go build ./" + e.pkg + ": " + e.err.Error() + "\n" + e.out
}

// needPackage skips (fails under CI=true) when the package dir of a
// binary the manifests run does not exist yet.
func needPackage(t *testing.T, pkg string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(moduleRoot(t), pkg)); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("deploy/ runs %s, but ./%s does not exist", filepath.Base(pkg), pkg)
		}
		t.Skipf("skipping: deploy/ runs %s, but ./%s does not exist yet", filepath.Base(pkg), pkg)
	}
}
