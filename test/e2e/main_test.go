// Package e2e drives the real ipkeeper and ipkeeperctl binaries the way a
// container runtime and an operator do: through upstream CNI plugins
// (bridge v1.9.1, spec 1.1.0), libcni, real network namespaces and a real
// datastore on disk.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/testenv"
	"github.com/ipkeeper/ipkeeper/test/e2e/cnirun"
)

var (
	// ipkeeperBin and ctlBin are freshly built from ./cmd; buildErr and
	// ctlBuildErr are set instead when that failed.
	ipkeeperBin, ctlBin   string
	buildErr, ctlBuildErr error
	// kubeBuildErr is set when ./cmd/ipkeeper-kube did not build.
	kubeBuildErr error
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
	// The plugins' node locks and hint files go to a directory of this
	// run's own, not the host's /run/ipkeeper (tests that need another
	// one set their own).
	lockDir, err := os.MkdirTemp("", "ipk-e2e-locks-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(lockDir)
	if os.Getenv("IPKEEPER_LOCK_DIR") == "" {
		_ = os.Setenv("IPKEEPER_LOCK_DIR", lockDir)
	}
	if buildErr = testenv.Build(ctx, binDir, "./cmd/ipkeeper"); buildErr == nil {
		ipkeeperBin = filepath.Join(binDir, "ipkeeper")
	}
	// The plugin's sibling for kubernetes configs, where the plugin
	// looks for it: next to itself.
	kubeBuildErr = testenv.Build(ctx, binDir, "./cmd/ipkeeper-kube")
	if ctlBuildErr = testenv.Build(ctx, binDir, "./cmd/ipkeeperctl"); ctlBuildErr == nil {
		ctlBin = filepath.Join(binDir, "ipkeeperctl")
	}
	if agentBuildErr = testenv.Build(ctx, binDir, "./cmd/ipkeeper-agent"); agentBuildErr == nil {
		agentBin = filepath.Join(binDir, "ipkeeper-agent")
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

// needKubeSibling fails the test when ipkeeper-kube did not build.
func needKubeSibling(t testing.TB) {
	t.Helper()
	if kubeBuildErr != nil {
		t.Fatalf("building ./cmd/ipkeeper-kube: %v", kubeBuildErr)
	}
}

// needCtl fails the test when ipkeeperctl did not build.
func needCtl(t testing.TB) {
	t.Helper()
	if ctlBuildErr != nil {
		t.Fatalf("building ./cmd/ipkeeperctl: %v", ctlBuildErr)
	}
}

// needRoot skips a test that creates network namespaces when not run as
// root, except under CI=true, where a skip would hide the test.
func needRoot(t *testing.T) {
	t.Helper()
	testenv.NeedRoot(t)
	testenv.NeedCommands(t, "ip", "ping")
}

// tool is the path of an upstream binary in toolsDir.
func tool(name string) string { return filepath.Join(toolsDir, name) }
