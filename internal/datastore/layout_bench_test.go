package datastore

import (
	"errors"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked/migrate"
)

// BenchmarkLayoutCheck measures what Open adds to an open of a
// migrated store: the read of the layout marker (ReadLayout), on a bbolt
// file and on the embedded etcd; it reports the kv calls per open.
//
//	go test ./internal/datastore -run '^$' -bench LayoutCheck -benchtime 500x
func BenchmarkLayoutCheck(b *testing.B) {
	srv := etcdtest.ForTest(b, nil)
	for _, c := range []struct {
		name string
		ds   config.Datastore
	}{
		{"local", config.Datastore{Type: config.DatastoreLocal, Path: b.TempDir()}},
		{"etcd", config.Datastore{Type: config.DatastoreEtcd, Endpoints: []string{srv.Endpoint}, Prefix: "/bench"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			kvs, err := openKV(b.Context(), c.ds)
			if err != nil {
				b.Fatal(err)
			}
			defer kvs.Close()
			st := kvbacked.New(kvs)
			if _, err := st.CreatePool(b.Context(), storePool()); err != nil && !errors.Is(err, store.ErrExists) {
				b.Fatal(err)
			}
			if _, err := migrate.Run(b.Context(), kvs); err != nil { // marks it (or finds it marked)
				b.Fatal(err)
			}
			cnt := &kvCounter{Store: kvs}
			b.ResetTimer()
			for b.Loop() {
				if _, _, err := openTyped(b.Context(), cnt, Warm{}); err != nil {
					b.Fatal(err)
				}
			}
			got := cnt.counts()
			b.ReportMetric(float64(got[0])/float64(b.N), "gets/open")
			b.ReportMetric(float64(got[1]+got[2])/float64(b.N), "lists+txns/open")
		})
	}
}

func storePool() store.Pool { return store.Pool{Spec: osV4} }
