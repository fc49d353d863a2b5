package kube

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
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

// openStore opens a store in a fresh partition as the ipkeeper-controller
// ServiceAccount, with the RBAC deploy/ ships: the datastore's ClusterRole,
// which the ipkeeper-node account shares, without the admission policy
// that narrows a node's writes to its own node (openAsNode), so that one
// store writes every node's objects.
func openStore(t testing.TB) *Store {
	t.Helper()
	return openWith(t, func(s *kubetest.Server) string {
		return s.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-controller")
	})
}

// openAsNode opens a store in a fresh partition with node's credentials:
// the ipkeeper-node ServiceAccount's token bound to a pod on node, which
// deploy/'s RBAC and node-writes policy let write node's own objects.
func openAsNode(t testing.TB, node string) *Store {
	t.Helper()
	return openWith(t, func(s *kubetest.Server) string { return s.NodeKubeconfig(t, node) })
}

func openWith(t testing.TB, kubeconfig func(*kubetest.Server) string) *Store {
	t.Helper()
	s := kubetest.Require(t, srv)
	st, err := Open(Config{
		Kubeconfig: kubeconfig(s),
		Prefix:     "t" + strconv.FormatInt(partitions.Add(1), 10),
		QPS:        1000, Burst: 1000,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// openTraced opens a store as the cluster admin in a fresh partition,
// with the log of every request it sends.
func openTraced(t testing.TB) (*Store, *requestLog) {
	t.Helper()
	s := kubetest.Require(t, srv)
	log := &requestLog{}
	cfg := rest.CopyConfig(s.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { log.next = rt; return log }
	st, err := NewForConfig(cfg, "t"+strconv.FormatInt(partitions.Add(1), 10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, log
}

// exchange is one request a traced store sent, and its answer's body.
type exchange struct {
	method, path, query, answer string
}

// requestLog keeps the exchanges of a traced store.
type requestLog struct {
	next http.RoundTripper
	mu   sync.Mutex
	all  []exchange
}

func (l *requestLog) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := l.next.RoundTrip(req)
	if err != nil {
		return res, err
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return nil, err
	}
	res.Body = io.NopCloser(bytes.NewReader(body))
	l.mu.Lock()
	l.all = append(l.all, exchange{req.Method, req.URL.Path, req.URL.RawQuery, string(body)})
	l.mu.Unlock()
	return res, nil
}

// take returns the exchanges logged since the last take.
func (l *requestLog) take() []exchange {
	l.mu.Lock()
	defer l.mu.Unlock()
	all := l.all
	l.all = nil
	return all
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
