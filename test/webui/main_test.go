// Package webui tests the address map in a real browser: Debian's
// chromium, headless, driven by chromedp, against `ipkeeperctl ui` serving
// a local store that the real plugin binary allocates from.
package webui

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/testenv"
)

var (
	// ipkeeperBin and ctlBin are built from ./cmd; buildErr is set
	// instead when that failed.
	ipkeeperBin, ctlBin string
	buildErr            error
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	binDir, err := os.MkdirTemp("", "ipk-webui-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "webui:", err)
		return 1
	}
	defer os.RemoveAll(binDir)
	if buildErr = testenv.Build(ctx, binDir, "./cmd/ipkeeper", "./cmd/ipkeeperctl"); buildErr == nil {
		ipkeeperBin, ctlBin = filepath.Join(binDir, "ipkeeper"), filepath.Join(binDir, "ipkeeperctl")
	}
	return m.Run()
}

func needBinaries(t *testing.T) {
	t.Helper()
	if buildErr != nil {
		t.Fatalf("building the binaries: %v", buildErr)
	}
}
