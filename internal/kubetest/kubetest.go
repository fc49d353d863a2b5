// Package kubetest runs a real kube-apiserver for tests: an embedded etcd in
// the test process, the upstream kube-apiserver as a child process on
// loopback ports with TLS, RBAC (--authorization-mode=Node,RBAC) and
// service-account tokens, and the RBAC objects of the project's deploy/
// directory applied — so tests exercise the permissions that ship.
//
// There is no kubelet, scheduler or controller manager: Pods stay Pending,
// DaemonSets and Deployments make no Pods, and a Pod deleted with grace
// period 0 is gone at once ("the pod died with its node").
//
// The binary comes from $IPKEEPER_KUBE_APISERVER or the cache that
// `make kube-apiserver` (scripts/kube-apiserver.sh) fills; kubetest never
// builds it. Without it tests skip, or fail under CI=true.
package kubetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
)

// Server is a running kube-apiserver with its etcd.
type Server struct {
	// AdminKubeconfig is the path of a kubeconfig for a cluster admin
	// (a static token in group system:masters); kubectl accepts it.
	AdminKubeconfig string
	// Config is the admin's client configuration (rate limits raised for
	// tests).
	Config *rest.Config
	// Client is a clientset authenticated as the admin.
	Client kubernetes.Interface
	// URL is the server's https://127.0.0.1:PORT address.
	URL string
	// CAFile is the PEM file of the CA that signed the serving certificate.
	CAFile string
	// Dir is the server's scratch directory (certificates, kubeconfigs,
	// the API server's log file apiserver.log); Stop removes it.
	Dir string

	proc *process
	etcd *etcdtest.Server
	stop func()
	// bin and pki start the API server again (Restart).
	bin string
	pki *pki
}

// Start starts etcd and kube-apiserver for t, applies the cluster-scoped
// and RBAC objects of deploy/ (CRDs, Namespaces, ServiceAccounts, Roles,
// ClusterRoles and their bindings), and stops everything in t.Cleanup.
// Without a kube-apiserver binary it skips t, or fails it under CI=true
// with a message saying `make kube-apiserver`.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := APIServerBinary()
	if err != nil {
		if errors.Is(err, ErrNoAPIServer) {
			missing(t, err)
		}
		t.Fatal(err)
	}
	s, err := start(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// StartMain starts a server to share across a package's tests from
// TestMain; the caller calls Stop after m.Run. When no binary is found it
// returns (nil, an error wrapping ErrNoAPIServer): keep the nil server and
// let each test call Require, which skips or (under CI=true) fails.
//
//	var srv *kubetest.Server
//
//	func TestMain(m *testing.M) {
//		s, err := kubetest.StartMain()
//		if err != nil && !errors.Is(err, kubetest.ErrNoAPIServer) {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(2)
//		}
//		srv = s
//		code := m.Run()
//		s.Stop()
//		os.Exit(code)
//	}
func StartMain() (*Server, error) {
	bin, err := APIServerBinary()
	if err != nil {
		return nil, err
	}
	return start(bin)
}

// Stop kills the API server by its PID, closes etcd and removes the
// scratch directory. It is idempotent and safe on a nil *Server.
func (s *Server) Stop() {
	if s == nil || s.stop == nil {
		return
	}
	s.stop()
}

func start(bin string) (s *Server, err error) {
	dir, err := os.MkdirTemp("", "kubetest-")
	if err != nil {
		return nil, err
	}
	s = &Server{Dir: dir}
	var once sync.Once
	s.stop = func() {
		once.Do(func() {
			if s.proc != nil {
				s.proc.kill()
			}
			s.etcd.Close()
			_ = os.RemoveAll(dir)
		})
	}
	defer func() {
		if err != nil {
			s.Stop()
			s = nil
		}
	}()

	p, err := writePKI(dir)
	if err != nil {
		return nil, err
	}
	s.CAFile = p.caFile
	s.bin, s.pki = bin, p
	s.etcd, err = etcdtest.Start("", nil)
	if err != nil {
		return nil, fmt.Errorf("kubetest: start etcd: %w", err)
	}
	if err := s.launch(bin, p); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), applyTimeout)
	defer cancel()
	if err := s.waitNamespaces(ctx, "default", "kube-system"); err != nil {
		return nil, err
	}
	if err := s.applyDeployRBAC(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// EtcdEndpoint is the client URL of the API server's etcd, for tools that
// write objects the API server then reads (its keys are under /registry,
// core objects stored as protobuf).
func (s *Server) EtcdEndpoint() string { return s.etcd.Endpoint }
