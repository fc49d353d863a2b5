package kvtest

import (
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/kv"
)

// testValueCond: a condition with a Value holds only while the key is at
// its version AND holds exactly those bytes; a missing key never meets it,
// and a failed value condition writes nothing.
func testValueCond(t *testing.T, s kv.Store) {
	v := put(t, s, "blocks/p/10.0.0.0-30", []byte(`{"free":[0,1,2,3]}`))
	other := put(t, s, "other", []byte("x"))
	forged := []byte(`{"free":[3,0,1,2]}`)
	for _, tc := range []struct {
		name string
		cond kv.Cond
	}{
		{"right version, other value", kv.Cond{Key: "blocks/p/10.0.0.0-30", Version: v, Value: forged}},
		{"right version, empty value", kv.Cond{Key: "blocks/p/10.0.0.0-30", Version: v, Value: []byte{}}},
		{"right version, value with a trailing byte", kv.Cond{Key: "blocks/p/10.0.0.0-30", Version: v, Value: []byte(`{"free":[0,1,2,3]} `)}},
		{"missing key with a value", kv.Cond{Key: "missing", Version: 0, Value: []byte("x")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Txn(t.Context(), []kv.Cond{tc.cond}, []kv.Op{{Key: "other", Value: []byte("written")}})
			wantConflict(t, err, tc.name)
			if e := get(t, s, "other"); e.Version != other || string(e.Value) != "x" {
				t.Fatalf("a failed value condition wrote: %q@%d", e.Value, e.Version)
			}
			wantMissing(t, get(t, s, "missing"), "missing")
		})
	}
	txn(t, s, []kv.Cond{{Key: "blocks/p/10.0.0.0-30", Version: v, Value: []byte(`{"free":[0,1,2,3]}`)}},
		[]kv.Op{{Key: "other", Value: []byte("written")}})
	if e := get(t, s, "other"); string(e.Value) != "written" {
		t.Fatalf("a holding value condition did not write: %q", e.Value)
	}
}
