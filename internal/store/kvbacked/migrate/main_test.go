package migrate_test

import (
	"context"
	"os"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked/kvbackedtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	kvbackedtest.Stop()
	os.Exit(code)
}

// backends are a bbolt file and a prefix of the shared embedded etcd.
var backends = kvbackedtest.KVBackends

// snapshot returns every key of s under prefix with its version and value.
func snapshot(t *testing.T, s kv.Store, prefix string) map[string]kv.KeyValue {
	t.Helper()
	es, err := s.List(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]kv.KeyValue{}
	for _, e := range es {
		out[e.Key] = e
	}
	return out
}

// raw returns the entries of s under prefix as key -> version.
func raw(t *testing.T, s kv.Store, prefix string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for k, e := range snapshot(t, s, prefix) {
		out[k] = e.Version
	}
	return out
}
