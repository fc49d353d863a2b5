package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/testenv"
	"github.com/ipkeeper/ipkeeper/test/e2e/cnirun"
)

var (
	buildOnce        sync.Once
	binDir, toolsDir string
	buildErr         error
)

// binaries builds ./cmd/ipkeeper once per test binary and locates the
// upstream host-local; the built binary is removed by TestMain.
func binaries(b *testing.B) (ipkeeper, hostLocal string) {
	b.Helper()
	buildOnce.Do(func() {
		ctx := context.Background()
		root, err := cnirun.RepoRoot()
		if err != nil {
			buildErr = err
			return
		}
		if binDir, buildErr = os.MkdirTemp("", "ipk-bench-bin-"); buildErr != nil {
			return
		}
		if buildErr = testenv.Build(ctx, binDir, "./cmd/ipkeeper"); buildErr != nil {
			return
		}
		toolsDir, buildErr = cnirun.EnsureTools(ctx, root)
	})
	if buildErr != nil {
		b.Fatal(buildErr)
	}
	return filepath.Join(binDir, "ipkeeper"), filepath.Join(toolsDir, "host-local")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// BenchmarkProcessAddDel measures one ADD+DEL pair, each a new plugin
// process, for ipkeeper (local store, fsynced) and host-local.
func BenchmarkProcessAddDel(b *testing.B) {
	ipk, hl := binaries(b)
	ranges := [][]map[string]any{{{"subnet": "10.93.0.0/16"}}}
	for _, p := range []struct {
		name, bin string
		ipam      func(dir string) map[string]any
	}{
		{"ipkeeper", ipk, func(dir string) map[string]any {
			return map[string]any{"type": "ipkeeper", "datastore": map[string]any{"type": "local", "path": dir}, "ranges": ranges}
		}},
		{"host-local", hl, func(dir string) map[string]any {
			return map[string]any{"type": "host-local", "dataDir": dir, "ranges": ranges}
		}},
	} {
		b.Run(p.name, func(b *testing.B) {
			conf, err := json.Marshal(map[string]any{"cniVersion": "1.1.0", "name": "bench", "type": "bridge", "ipam": p.ipam(b.TempDir())})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			i := 0
			for b.Loop() {
				id := fmt.Sprintf("bench-%d", i)
				i++
				for _, cmd := range []string{"ADD", "DEL"} {
					out, err := cnirun.Run(ctx, p.bin, cnirun.Call{
						Command: cmd, ContainerID: id, IfName: "eth0", NetNS: "/run/netns/bench-never-entered",
						Path: filepath.Dir(p.bin), Stdin: conf,
					})
					if err != nil || out.ExitCode != 0 {
						b.Fatalf("%s %s: %v\n%v", cmd, id, err, out)
					}
				}
			}
		})
	}
}
