// Package etcdsource_test imports Calico's state from a real (embedded)
// etcd. It lives apart from the calico package's other tests because
// linking the etcd server makes its test binary slow to build.
package etcdsource_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/consistency"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/importer"
	"github.com/ipkeeper/ipkeeper/internal/importer/calico"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
)

// TestImportFromCalicoEtcd writes Calico's keys (a block, its handles, the
// host affinity, and an unrelated Calico key) into a real etcd, imports
// them, and checks the result is what the same data imported from a file
// gives.
func TestImportFromCalicoEtcd(t *testing.T) {
	ctx := context.Background()
	srv := etcdtest.ForTest(t, nil)
	block, err := os.ReadFile("../../testdata/calico-block-100.112.209.128-26.json")
	if err != nil {
		t.Fatal(err)
	}
	// Write through a store rooted at /calico so the keys are Calico's own.
	w, err := etcd.Open(ctx, etcd.Config{Endpoints: []string{srv.Endpoint}, Prefix: "/calico"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ops := []kv.Op{
		{Key: "ipam/v2/assignment/ipv4/block/100.112.209.128-26", Value: block},
		{Key: "ipam/v2/handle/k8s-pod-network.884e11ced699fe17a493ffd59f18c97fd090fd8150411a11643a280a8250c510",
			Value: []byte(`{"handleID":"k8s-pod-network.884e11ced699fe17a493ffd59f18c97fd090fd8150411a11643a280a8250c510","block":{"100.112.209.128/26":1},"deleted":false}`)},
		{Key: "ipam/v2/host/ip-10-200-205-203/ipv4/block/100.112.209.128-26", Value: []byte(`{"state":"confirmed","deleted":false}`)},
		{Key: "resources/v3/projectcalico.org/ippools/default-ipv4-ippool", Value: []byte(`{"kind":"IPPool"}`)},
	}
	if err := w.Txn(ctx, nil, ops); err != nil {
		t.Fatal(err)
	}

	kvs, err := calico.ReadEtcd(ctx, etcd.Config{Endpoints: []string{srv.Endpoint}})
	if err != nil {
		t.Fatal(err)
	}
	if len(kvs) != 3 {
		t.Fatalf("read %d entries, want the 3 IPAM keys: %q", len(kvs), kvs)
	}
	plan, err := calico.Plan(kvs, calico.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Warnings) != 0 {
		t.Errorf("warnings: %q", plan.Warnings)
	}
	fileKVs, err := calico.ParseFile(block)
	if err != nil {
		t.Fatal(err)
	}
	fromFile, err := calico.Plan(fileKVs, calico.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(plan.Addresses(), fromFile.Addresses()) || len(plan.Addresses()) != 9 {
		t.Fatalf("from etcd %v, from the file %v", plan.Addresses(), fromFile.Addresses())
	}

	st, err := datastore.Open(ctx, config.Datastore{Type: config.DatastoreLocal, Path: t.TempDir()}, datastore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := importer.ApplyStore(ctx, st, plan, false); err != nil {
		t.Fatal(err)
	}
	r, err := consistency.CheckStore(ctx, st)
	if err != nil || len(r.Problems) != 0 || r.Counts.Allocated != 9 {
		t.Fatalf("after import: %+v, %v", r, err)
	}
}

func TestReadEtcdUnreachable(t *testing.T) {
	port, err := etcdtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	_, err = calico.ReadEtcd(context.Background(), etcd.Config{Endpoints: []string{"127.0.0.1:" + strconv.Itoa(port)}, RequestTimeout: 500 * time.Millisecond})
	if err == nil {
		t.Fatal("read from a closed port succeeded")
	}
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("err = %v, want store.ErrUnavailable", err)
	}
}
