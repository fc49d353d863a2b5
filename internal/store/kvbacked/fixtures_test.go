package kvbacked_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
	"github.com/ipkeeper/ipkeeper/internal/store/local"
)

// The checked-in first-layout stores (fixtures_gen_test.go writes them).
const (
	fixtureBolt     = "firstlayout.db"
	fixtureBoltWant = "firstlayout.db.want.json"
	fixtureEtcd     = "firstlayout-etcd.json"
	fixtureEtcdWant = "firstlayout-etcd.want.json"
)

// fixtureState is v1State as JSON: what the first-layout allocator reported about
// the store it wrote.
type fixtureState struct {
	Handles []ipam.Handle `json:"handles"`
	Blocks  []ipam.Block  `json:"blocks"`
}

func (st v1State) fixture() fixtureState { return fixtureState{Handles: st.handles, Blocks: st.blocks} }

// etcdDump is an etcd key dump: every key under the store's prefix
// (relative to it), its value and its mod revision when dumped.
type etcdDump struct {
	Comment string     `json:"comment"`
	KVs     []dumpedKV `json:"kvs"`
}

type dumpedKV struct {
	Key         string `json:"key"`
	Value       string `json:"value"`
	ModRevision int64  `json:"mod_revision"`
}

// readFixture reads testdata/name.
func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("%v (regenerate with -regenerate-fixtures)", err)
	}
	return b
}

func readWant(t *testing.T, name string) v1State {
	t.Helper()
	var f fixtureState
	if err := json.Unmarshal(readFixture(t, name), &f); err != nil {
		t.Fatalf("testdata/%s: %v", name, err)
	}
	if len(f.Handles) == 0 || len(f.Blocks) == 0 {
		t.Fatalf("testdata/%s holds no handles or blocks", name)
	}
	return v1State{handles: f.Handles, blocks: f.Blocks}
}

// onlyFirstLayout fails unless s holds first-layout keys only.
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

// The bbolt file and the etcd dump writeFirstLayout wrote while the
// first-layout allocator was the production one (checked in: they keep
// testing the migration independently of package firstlayout) migrate
// with every handle, address and block the same through the typed store,
// the pools fenced, and a second run changes nothing.
func TestMigrateCheckedInFirstLayout(t *testing.T) {
	t.Run("local", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, local.FileName), readFixture(t, fixtureBolt), 0o600); err != nil {
			t.Fatal(err)
		}
		kvs, err := local.Open(t.Context(), dir)
		if err != nil {
			t.Fatal(err)
		}
		defer kvs.Close()
		migrateFixture(t, kvs, readWant(t, fixtureBoltWant))
	})
	t.Run("etcd", func(t *testing.T) {
		var d etcdDump
		if err := json.Unmarshal(readFixture(t, fixtureEtcd), &d); err != nil {
			t.Fatalf("testdata/%s: %v", fixtureEtcd, err)
		}
		kvs := openEtcd(t)
		defer kvs.Close()
		lim := kv.LimitsOf(kvs)
		var ops []kv.Op
		for i, e := range d.KVs {
			op := kv.Op{Key: e.Key, Value: []byte(e.Value)}
			if len(ops) > 0 && !lim.Fits(nil, append(ops, op)) {
				if err := kvs.Txn(t.Context(), nil, ops); err != nil {
					t.Fatal(err)
				}
				ops = nil
			}
			ops = append(ops, op)
			if i == len(d.KVs)-1 {
				if err := kvs.Txn(t.Context(), nil, ops); err != nil {
					t.Fatal(err)
				}
			}
		}
		migrateFixture(t, kvs, readWant(t, fixtureEtcdWant))
	})
}

func migrateFixture(t *testing.T, kvs kv.Store, want v1State) {
	t.Helper()
	onlyFirstLayout(t, kvs)
	rep, err := kvbacked.Migrate(t.Context(), kvs)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Done || rep.Nodes != 5 || rep.Fenced != 4 || rep.Pools != 4 || len(rep.Orphans)+len(rep.Strays) != 0 {
		t.Errorf("report %+v", rep)
	}
	checkMigrated(t, kvs, want)
	if rep, err := kvbacked.Migrate(t.Context(), kvs); err != nil || !rep.Done {
		t.Fatalf("second run: %+v, %v", rep, err)
	}
}
