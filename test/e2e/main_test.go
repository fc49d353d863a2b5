// Package e2e drives the real ipkeeper and ipkeeperctl binaries the way a
// container runtime and an operator do: through upstream CNI plugins
// (bridge v1.9.1, spec 1.1.0), libcni, real network namespaces and a real
// datastore on disk.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/test/e2e/cnirun"
)

var (
	// ipkeeperBin and ctlBin are freshly built from ./cmd; buildErr and
	// ctlBuildErr are set instead when that failed.
	ipkeeperBin, ctlBin   string
	buildErr, ctlBuildErr error
	// toolsDir holds the upstream plugins and cnitool.
	toolsDir string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	root, err := cnirun.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	binDir, err := os.MkdirTemp("", "ipk-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(binDir)
	if buildErr = cnirun.Build(ctx, root, binDir, "./cmd/ipkeeper"); buildErr == nil {
		ipkeeperBin = filepath.Join(binDir, "ipkeeper")
	}
	if ctlBuildErr = cnirun.Build(ctx, root, binDir, "./cmd/ipkeeperctl"); ctlBuildErr == nil {
		ctlBin = filepath.Join(binDir, "ipkeeperctl")
	}
	if toolsDir, err = cnirun.EnsureTools(ctx, root); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	return m.Run()
}

// needIpkeeper fails the test when the plugin did not build.
func needIpkeeper(t *testing.T) {
	t.Helper()
	if buildErr != nil {
		t.Fatalf("building ./cmd/ipkeeper: %v", buildErr)
	}
}

// needCtl fails the test when ipkeeperctl did not build.
func needCtl(t *testing.T) {
	t.Helper()
	if ctlBuildErr != nil {
		t.Fatalf("building ./cmd/ipkeeperctl: %v", ctlBuildErr)
	}
}

// needRoot skips a test that creates network namespaces when not run as
// root, except under CI=true, where a skip would hide the test.
func needRoot(t *testing.T) {
	t.Helper()
	var missing string
	switch {
	case os.Geteuid() != 0:
		missing = "root (network namespaces)"
	default:
		for _, tool := range []string{"ip", "ping"} {
			if _, err := exec.LookPath(tool); err != nil {
				missing = tool + " (apt-get install iproute2 iputils-ping)"
			}
		}
	}
	if missing == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("this test needs %s; under CI=true that is a failure, not a skip", missing)
	}
	t.Skipf("skipping: this test needs %s; run as root, e.g. sudo -E go test ./test/e2e", missing)
}

// tool is the path of an upstream binary in toolsDir.
func tool(name string) string { return filepath.Join(toolsDir, name) }
