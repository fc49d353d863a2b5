// Package deploy tests what a cluster admin applies (deploy/): the
// manifests against a real kube-apiserver with RBAC on, the least-privilege
// roles, the installer binary, and the container image built without a
// container daemon.
package deploy

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/kubetest"
)

// srv is the API server shared by the tests that only read or dry-run;
// deploy/'s RBAC is applied on it.
var srv *kubetest.Server

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "deploy-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	binDir = dir
	s, err := kubetest.StartMain()
	if err != nil && !errors.Is(err, kubetest.ErrNoAPIServer) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	srv = s
	code := m.Run()
	s.Stop()
	_ = os.RemoveAll(binDir)
	os.Exit(code)
}

// server returns the shared API server, or skips (fails under CI=true).
func server(t *testing.T) *kubetest.Server {
	t.Helper()
	return kubetest.Require(t, srv)
}

// kubectl returns the kubectl binary, or skips (fails under CI=true: make
// test installs Debian's kubernetes-client).
func kubectl(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("kubectl")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("kubectl is not on PATH; under CI=true this is a failure (make sysdeps installs kubernetes-client)")
		}
		t.Skip("skipping: kubectl is not on PATH (make sysdeps installs kubernetes-client)")
	}
	return p
}

// deployDir is the project's deploy/ directory.
func deployDir(t *testing.T) string {
	t.Helper()
	d, err := kubetest.DeployDir()
	if err != nil {
		t.Fatal(err)
	}
	return d
}
