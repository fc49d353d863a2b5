// Package controller tests ipkeeper-controller end to end: the real
// binaries (ipkeeper-controller, the ipkeeper plugin, ipkeeperctl) as
// processes, against a real kube-apiserver with the CRDs and RBAC of
// deploy/ (the controller authenticates as its shipped ServiceAccount),
// and real datastores (a local store in a temp dir; embedded etcd for
// failover; a partition of the API server's CRDs for the kubernetes
// datastore).
// With no kubelet, "a pod died with its node" is a delete with grace
// period 0 and no CNI DEL.
package controller

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
)

var (
	srv *kubetest.Server
	// Binaries built from ./cmd for this run.
	pluginBin, ctlBin, controllerBin string
	buildErr                         error
	// saKubeconfig authenticates as the controller's ServiceAccount.
	saKubeconfig string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	bin, err := os.MkdirTemp("", "ipk-controller-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(bin)
	// The plugin processes' node locks and hint files go to the run's
	// directory, not the host's /run/ipkeeper.
	locks := filepath.Join(bin, "locks")
	if err := os.Mkdir(locks, 0o700); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	os.Setenv("IPKEEPER_LOCK_DIR", locks)
	// ipkeeper-kube serves the plugin's configs on the kubernetes
	// datastore, from the same directory.
	buildErr = testenv.Build(ctx, bin, "./cmd/ipkeeper", "./cmd/ipkeeper-kube", "./cmd/ipkeeperctl", "./cmd/ipkeeper-controller")
	pluginBin, ctlBin, controllerBin = filepath.Join(bin, "ipkeeper"), filepath.Join(bin, "ipkeeperctl"), filepath.Join(bin, "ipkeeper-controller")
	s, err := kubetest.StartMain()
	if err != nil && !errors.Is(err, kubetest.ErrNoAPIServer) {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	srv = s
	defer s.Stop()
	return m.Run()
}

// setup skips or fails without an API server and fails when the binaries
// did not build; it returns the server.
func setup(t *testing.T) *kubetest.Server {
	t.Helper()
	s := kubetest.Require(t, srv)
	if buildErr != nil {
		t.Fatalf("building the binaries: %v", buildErr)
	}
	if saKubeconfig == "" {
		saKubeconfig = s.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-controller")
	}
	return s
}
