package local

import (
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/kv"
)

// BenchmarkTxn measures one single-key CAS transaction (the Get that reads
// the version, then the Txn), fsync included.
func BenchmarkTxn(b *testing.B) {
	val := []byte(`{"handle":"net.0123456789abcdef.eth0","pod":"default/web-0"}`)

	b.Run("sequential", func(b *testing.B) {
		s, err := Open(b.Context(), b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		b.ReportAllocs()
		for b.Loop() {
			if err := casOnce(b, s, "ips/pool/10.0.0.1", val); err != nil {
				b.Fatal(err)
			}
		}
	})

	b.Run("parallel", func(b *testing.B) {
		s, err := Open(b.Context(), b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		var id atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			// One key per goroutine: no conflicts, only bbolt's single
			// writer serializes the commits.
			key := "ips/pool/10.0.1." + strconv.FormatInt(id.Add(1), 10)
			for pb.Next() {
				if err := casOnce(b, s, key, val); err != nil {
					b.Error(err) // Fatal is not allowed in RunParallel's goroutines
					return
				}
			}
		})
	})
}

// casOnce reads key's version and writes val guarded by it. Each caller
// owns its key, so a conflict is an error too.
func casOnce(b *testing.B, s *Store, key string, val []byte) error {
	kvs, err := s.Get(b.Context(), key)
	if err != nil {
		return err
	}
	return s.Txn(b.Context(), []kv.Cond{{Key: key, Version: kvs[0].Version}}, []kv.Op{{Key: key, Value: val}})
}
