// Package storage_test drives the allocator on the typed storage contract
// (store.Store) across its three real backends — a bbolt file, an embedded
// etcd and a kube-apiserver with the shipped CRDs and RBAC — the way a
// cluster does: many nodes, concurrent ADDs per node serialized by the
// node's lock (as plugin processes are), each operation by a fresh
// allocator (as each plugin process is).
package storage_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
	"github.com/ipkeeper/ipkeeper/internal/store/kube"
)

var (
	apiserver *kubetest.Server
	etcdSrv   *etcdtest.Server
	instances atomic.Int64
)

func TestMain(m *testing.M) {
	s, err := kubetest.StartMain()
	if err != nil && !errors.Is(err, kubetest.ErrNoAPIServer) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	apiserver = s
	e, stop := etcdtest.Shared()
	etcdSrv = e
	code := m.Run()
	stop()
	s.Stop()
	os.Exit(code)
}

// backend opens a fresh, empty store of one real backend.
type backend struct {
	name string
	open func(t testing.TB) store.Store
}

var backends = []backend{
	{"local", func(t testing.TB) store.Store {
		s, err := datastore.Open(context.Background(), config.Datastore{Type: config.DatastoreLocal, Path: t.TempDir()}, datastore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}},
	{"etcd", func(t testing.TB) store.Store {
		s, err := datastore.Open(context.Background(), config.Datastore{Type: config.DatastoreEtcd,
			Endpoints: []string{etcdSrv.Endpoint},
			Prefix:    fmt.Sprintf("/storage%d-%s", instances.Add(1), strings.ReplaceAll(t.Name(), "/", "_")),
		}, datastore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}},
	{"kubernetes", func(t testing.TB) store.Store {
		srv := kubetest.Require(t, apiserver)
		s, err := kube.Open(kube.Config{
			Kubeconfig: srv.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-controller"),
			Prefix:     fmt.Sprint("s", instances.Add(1)),
			QPS:        1000, Burst: 1000,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}},
}
