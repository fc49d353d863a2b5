package migrate_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked/kvbackedtest"
	"github.com/ipkeeper/ipkeeper/internal/store/local"
)

// The checked-in first-layout stores (testdata/README.md).
const (
	fixtureBolt     = "firstlayout.db"
	fixtureBoltWant = "firstlayout.db.want.json"
	fixtureEtcd     = "firstlayout-etcd.json"
	fixtureEtcdWant = "firstlayout-etcd.want.json"
)

// firstState is what the first layout's allocator reported about a store
// it wrote: every handle and every block (the *.want.json fixtures).
type firstState struct {
	Handles []ipam.Handle `json:"handles"`
	Blocks  []ipam.Block  `json:"blocks"`
}

// handleIPs returns the addresses the first layout gave handle id.
func (st firstState) handleIPs(id string) []ipam.HandleIP {
	for _, h := range st.Handles {
		if h.ID == id {
			return h.IPs
		}
	}
	return nil
}

// etcdDump is an etcd key dump: every key under the store's prefix
// (relative to it), its value and its mod revision when dumped.
type etcdDump struct {
	Comment string `json:"comment"`
	KVs     []struct {
		Key         string `json:"key"`
		Value       string `json:"value"`
		ModRevision int64  `json:"mod_revision"`
	} `json:"kvs"`
}

// readFixture reads testdata/name.
func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readWant(t *testing.T, name string) firstState {
	t.Helper()
	var f firstState
	if err := json.Unmarshal(readFixture(t, name), &f); err != nil {
		t.Fatalf("testdata/%s: %v", name, err)
	}
	if len(f.Handles) == 0 || len(f.Blocks) == 0 {
		t.Fatalf("testdata/%s holds no handles or blocks", name)
	}
	return f
}

// openFirstLayout opens a store of backend b holding its checked-in
// first-layout fixture — for local a copy of the bbolt file, for etcd the
// key dump written under a fresh prefix — and returns what the first
// layout's allocator reported about it. The test closes the store.
func openFirstLayout(t *testing.T, b kvbackedtest.KVBackend) (kv.Store, firstState) {
	t.Helper()
	if b.Name == "local" {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, local.FileName), readFixture(t, fixtureBolt), 0o600); err != nil {
			t.Fatal(err)
		}
		kvs, err := local.Open(t.Context(), dir)
		if err != nil {
			t.Fatal(err)
		}
		onlyFirstLayout(t, kvs)
		return kvs, readWant(t, fixtureBoltWant)
	}
	var d etcdDump
	if err := json.Unmarshal(readFixture(t, fixtureEtcd), &d); err != nil {
		t.Fatalf("testdata/%s: %v", fixtureEtcd, err)
	}
	kvs := b.Open(t)
	lim := kv.LimitsOf(kvs)
	var ops []kv.Op
	for _, e := range d.KVs {
		op := kv.Op{Key: e.Key, Value: []byte(e.Value)}
		if len(ops) > 0 && !lim.Fits(nil, append(ops, op)) {
			if err := kvs.Txn(t.Context(), nil, ops); err != nil {
				t.Fatal(err)
			}
			ops = nil
		}
		ops = append(ops, op)
	}
	if err := kvs.Txn(t.Context(), nil, ops); err != nil {
		t.Fatal(err)
	}
	onlyFirstLayout(t, kvs)
	return kvs, readWant(t, fixtureEtcdWant)
}

// onlyFirstLayout fails unless s holds first-layout keys only, blocks
// among them.
func onlyFirstLayout(t *testing.T, s kv.Store) {
	t.Helper()
	es, err := s.List(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	blocks := 0
	for _, e := range es {
		switch {
		case strings.HasPrefix(e.Key, "blocks/"):
			blocks++
		case strings.HasPrefix(e.Key, "pools/"), strings.HasPrefix(e.Key, "handles/"), strings.HasPrefix(e.Key, "affinity/"):
		default:
			t.Fatalf("the fixture holds %s, not a first-layout key", e.Key)
		}
	}
	if blocks == 0 {
		t.Fatal("the fixture holds no first-layout block")
	}
}
