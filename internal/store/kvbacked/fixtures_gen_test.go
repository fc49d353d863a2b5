package kvbacked_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/store/local"
)

// regenerate rewrites the checked-in first-layout stores:
//
//	go test ./internal/store/kvbacked -run '^TestRegenerateFirstLayoutFixtures$' -regenerate-fixtures
//
// It writes with the previous version's allocator (package firstlayout),
// kept frozen for that; the checked-in fixtures are what it wrote when it
// was the production allocator and are not to be rewritten without cause.
var regenerate = flag.Bool("regenerate-fixtures", false, "rewrite testdata/firstlayout* with the first-layout allocator")

// TestRegenerateFirstLayoutFixtures writes, with the first-layout allocator
// (writeFirstLayout), a bbolt store file and an etcd key dump with what
// the allocator reports about each, for TestMigrateCheckedInFirstLayout.
func TestRegenerateFirstLayoutFixtures(t *testing.T) {
	if !*regenerate {
		t.Skip("a generator: run with -regenerate-fixtures to rewrite testdata/firstlayout*")
	}
	dir := t.TempDir()
	ls, err := local.Open(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	want := writeFirstLayout(t, ls)
	if err := ls.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := os.ReadFile(filepath.Join(dir, local.FileName))
	if err != nil {
		t.Fatal(err)
	}
	writeFixture(t, fixtureBolt, db)
	writeFixture(t, fixtureBoltWant, mustJSON(t, want.fixture()))

	es := openEtcd(t)
	defer es.Close()
	want = writeFirstLayout(t, es)
	all, err := es.List(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	d := etcdDump{Comment: "first-layout keys written by the first-layout allocator (writeFirstLayout), relative to the etcd prefix; regenerate with -regenerate-fixtures"}
	for _, e := range all {
		d.KVs = append(d.KVs, dumpedKV{Key: e.Key, Value: string(e.Value), ModRevision: e.Version})
	}
	writeFixture(t, fixtureEtcd, mustJSON(t, d))
	writeFixture(t, fixtureEtcdWant, mustJSON(t, want.fixture()))
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

func writeFixture(t *testing.T, name string, data []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join("testdata", name), data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote testdata/%s (%d bytes)", name, len(data))
}
