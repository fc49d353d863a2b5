// Package node runs ipkeeper on one real node started by the tests
// themselves: containerd (with runc) driving the upstream bridge and
// loopback plugins and ipkeeper from CNI directories of the test's own, a
// kubelet built from k8s.io/kubernetes registered to a real
// kube-apiserver with the RBAC of deploy/, and ipkeeper installed as
// deploy/ describes it: ipkeeper-install writing the plugin, config list
// and kubeconfig into those CNI directories, ipkeeper-agent and
// ipkeeper-controller as processes with their ServiceAccounts.
//
// The scenarios assert what the runtime and the API report (pod phases,
// status.podIP, events, the Node's conditions) against what ipkeeper
// holds. Each test has a node of its own, in a network namespace of its
// own (the bridge and the pods' veths never touch the machine's network),
// with its own datastore partition; the API server is shared.
//
// Prerequisites (make node-tools builds the first three into the cache
// scripts/kube-apiserver.sh fills; make sysdeps installs the others): a
// kubelet (scripts/kubelet.sh), containerd 2.x with its runc shim and ctr
// (scripts/containerd.sh), crictl (scripts/crictl.sh), runc, nsenter and
// ip; root. Without them the tests skip, or fail under CI=true.
package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/testenv"
	"github.com/ipkeeper/ipkeeper/test/e2e/cnirun"
)

var (
	srv *kubetest.Server
	// binDir holds the binaries built for the run: ipkeeper's commands,
	// the pause program and its image tarball.
	binDir   string
	toolsDir string // the upstream CNI plugins (.tools/bin)
	buildErr error
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	root, err := cnirun.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	binDir, err = os.MkdirTemp("", "ipkn-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(binDir)
	// Static binaries, as the image ships them (and the pause image
	// needs: it holds no libc).
	os.Setenv("CGO_ENABLED", "0")
	buildErr = buildAll(ctx, root)
	s, err := kubetest.StartMain()
	if err != nil && !errors.Is(err, kubetest.ErrNoAPIServer) {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	srv = s
	defer s.Stop()
	return m.Run()
}

// buildAll builds ipkeeper's binaries statically (as the image ships
// them), the pause image, and makes sure the upstream CNI plugins exist.
func buildAll(ctx context.Context, root string) error {
	if err := testenv.Build(ctx, binDir, "./cmd/ipkeeper", "./cmd/ipkeeper-kube", "./cmd/ipkeeperctl",
		"./cmd/ipkeeper-controller", "./cmd/ipkeeper-agent", "./cmd/ipkeeper-install", "./test/node/pause"); err != nil {
		return err
	}
	if err := packPause(filepath.Join(binDir, "pause"), filepath.Join(binDir, "pause.tar")); err != nil {
		return err
	}
	var err error
	toolsDir, err = cnirun.EnsureTools(ctx, root)
	return err
}

func bin(name string) string { return filepath.Join(binDir, name) }
