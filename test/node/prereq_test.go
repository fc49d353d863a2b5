package node

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/testenv"
)

// Versions the scripts build by default; the cache paths are keyed by
// them (keep them in step with scripts/containerd.sh and
// scripts/crictl.sh; the kubelet's is kubetest.KubeVersion).
const (
	containerdVersion = "v2.4.2"
	crictlVersion     = "v1.37.0"
)

// Environment variables naming binaries, winning over the cache.
const (
	envKubelet       = "IPKEEPER_KUBELET"
	envContainerdDir = "IPKEEPER_CONTAINERD_DIR"
	envCrictl        = "IPKEEPER_CRICTL"
)

// tools are the node's binaries.
type tools struct {
	kubelet, containerd, shim, ctr, crictl string
}

// cacheDir is the scripts' cache: IPKEEPER_CACHE, else
// XDG_CACHE_HOME/ipkeeper, else ~/.cache/ipkeeper.
func cacheDir() string {
	if d := os.Getenv("IPKEEPER_CACHE"); d != "" {
		return d
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "ipkeeper")
}

// need returns the node's binaries, the shared API server and checks
// root and the system commands; what is missing skips the test, or fails
// it under CI=true, naming the make target that provides it.
func need(t *testing.T) (*kubetest.Server, tools) {
	t.Helper()
	testenv.NeedRoot(t)
	testenv.NeedCommands(t, "runc", "nsenter", "ip")
	s := kubetest.Require(t, srv)
	if buildErr != nil {
		t.Fatalf("building the binaries: %v", buildErr)
	}
	cache := cacheDir()
	cdir := os.Getenv(envContainerdDir)
	if cdir == "" {
		cdir = filepath.Join(cache, "containerd-"+containerdVersion)
	}
	tl := tools{
		kubelet:    envOr(envKubelet, filepath.Join(cache, "kubelet-"+kubetest.KubeVersion, "kubelet")),
		containerd: filepath.Join(cdir, "containerd"),
		shim:       filepath.Join(cdir, "containerd-shim-runc-v2"),
		ctr:        filepath.Join(cdir, "ctr"),
		crictl:     envOr(envCrictl, filepath.Join(cache, "crictl-"+crictlVersion, "crictl")),
	}
	for _, p := range []struct{ path, how string }{
		{tl.kubelet, "make kubelet (scripts/kubelet.sh, a one-time ~15 min build) or " + envKubelet},
		{tl.containerd, "make containerd (scripts/containerd.sh) or " + envContainerdDir},
		{tl.shim, "make containerd (scripts/containerd.sh) or " + envContainerdDir},
		{tl.ctr, "make containerd (scripts/containerd.sh) or " + envContainerdDir},
		{tl.crictl, "make crictl (scripts/crictl.sh) or " + envCrictl},
	} {
		if fi, err := os.Stat(p.path); err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			testenv.Missing(t, fmt.Sprintf("%s (%s)", p.path, p.how))
		}
	}
	return s, tl
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
