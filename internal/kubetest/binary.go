package kubetest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// KubeVersion is the kube-apiserver version scripts/kube-apiserver.sh
// builds by default; the cache path below is keyed by it.
const KubeVersion = "v1.37.1"

// EnvAPIServer names an environment variable holding the path of a
// kube-apiserver binary; it wins over the build cache.
const EnvAPIServer = "IPKEEPER_KUBE_APISERVER"

// ErrNoAPIServer means no kube-apiserver binary was found. Tests skip on
// it, or fail under CI=true (see Require).
var ErrNoAPIServer = errors.New("kubetest: no kube-apiserver binary (run `make kube-apiserver`, a one-time ~14 min build, or set " + EnvAPIServer + ")")

// cachedBinary is where scripts/kube-apiserver.sh puts the binary: the
// same rule as the script (IPKEEPER_CACHE, else XDG_CACHE_HOME/ipkeeper,
// else ~/.cache/ipkeeper), keyed by KubeVersion.
func cachedBinary() string {
	dir := os.Getenv("IPKEEPER_CACHE")
	if dir == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return ""
			}
			base = filepath.Join(home, ".cache")
		}
		dir = filepath.Join(base, "ipkeeper")
	}
	return filepath.Join(dir, "kube-apiserver-"+KubeVersion, "kube-apiserver")
}

// APIServerBinary returns the kube-apiserver to run: $IPKEEPER_KUBE_APISERVER
// when set (an error when it is not an executable file), else the binary
// scripts/kube-apiserver.sh caches. It never builds one: a missing binary
// is ErrNoAPIServer.
func APIServerBinary() (string, error) {
	if p := os.Getenv(EnvAPIServer); p != "" {
		if err := executable(p); err != nil {
			return "", fmt.Errorf("kubetest: %s=%q: %w", EnvAPIServer, p, err)
		}
		return p, nil
	}
	p := cachedBinary()
	if p == "" || executable(p) != nil {
		return "", fmt.Errorf("%w; looked at %s", ErrNoAPIServer, p)
	}
	return p, nil
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("not an executable file")
	}
	return nil
}

// inCI reports whether a missing prerequisite must fail rather than skip.
func inCI() bool { return os.Getenv("CI") == "true" }

// missing skips t, or fails it under CI=true, with err's message (which
// tells how to get the binary: make kube-apiserver).
func missing(t testing.TB, err error) {
	t.Helper()
	if inCI() {
		t.Fatalf("%v; under CI=true this is a failure, not a skip", err)
	}
	t.Skipf("skipping: %v", err)
}

// Require returns s, or — when s is nil because StartMain found no binary —
// skips t (fails it under CI=true) with the message that says
// `make kube-apiserver`. For tests sharing one server from TestMain.
func Require(t testing.TB, s *Server) *Server {
	t.Helper()
	if s == nil {
		_, err := APIServerBinary()
		if err == nil {
			err = errors.New("kubetest: the shared API server did not start (see TestMain's output)")
			t.Fatal(err)
		}
		missing(t, err)
	}
	return s
}
