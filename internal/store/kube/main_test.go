package kube

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/ipkeeper/ipkeeper/internal/kubetest"
)

// srv is the API server the package's tests share: the CRDs and RBAC of
// deploy/ are applied on it; every test opens its own partition.
var srv *kubetest.Server

func TestMain(m *testing.M) {
	s, err := kubetest.StartMain()
	if err != nil && !errors.Is(err, kubetest.ErrNoAPIServer) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	srv = s
	code := m.Run()
	s.Stop()
	os.Exit(code)
}

var partitions atomic.Int64

// openNode opens a store in a fresh partition as the ipkeeper-node
// ServiceAccount, with the RBAC deploy/ ships.
func openNode(t testing.TB) *Store {
	t.Helper()
	s := kubetest.Require(t, srv)
	st, err := Open(Config{
		Kubeconfig: s.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-node"),
		Prefix:     "t" + strconv.FormatInt(partitions.Add(1), 10),
		QPS:        1000, Burst: 1000,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// openTraced opens a store as the cluster admin in a fresh partition, its
// requests passing through the round tripper wrap returns.
func openTraced(t testing.TB, wrap func(http.RoundTripper) http.RoundTripper) *Store {
	t.Helper()
	s := kubetest.Require(t, srv)
	cfg := rest.CopyConfig(s.Config)
	cfg.WrapTransport = wrap
	st, err := NewForConfig(cfg, "t"+strconv.FormatInt(partitions.Add(1), 10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// openAdmin opens a store as the cluster admin in partition prefix.
func openAdmin(t testing.TB, prefix string) *Store {
	t.Helper()
	s := kubetest.Require(t, srv)
	st, err := NewForConfig(s.Config, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
