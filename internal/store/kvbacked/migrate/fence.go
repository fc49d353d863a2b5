package migrate

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
)

// firstPoolPrefix is the first layout's pool prefix. Its keys are never
// deleted: Run leaves them marked Deleting, which is the upgrade fence
// (see fence).
const firstPoolPrefix = "pools/"

// fencedOrigin replaces a fenced first-layout pool's Origin "import": the
// first layout's allocator lets a config redefine an imported pool (and
// so would clear the mark); any other origin makes it refuse instead.
const fencedOrigin = "migrated"

// fence is the upgrade fence: every first-layout pool gets a typed copy
// (its value as it is, at kvbacked.PoolKey) and its first-layout key is
// marked Deleting (Origin "import" becoming fencedOrigin), in transactions
// within the store's limits, each guarded by the versions in snap — copy
// and mark of a pool in one transaction, so a typed copy exists exactly
// when its pool was fenced once. The first layout's allocator guards every
// allocation by its pools' versions and allocates from no pool marked
// Deleting, so from the fence on a process of the earlier version fails
// its ADD (ErrNoPool, CNI 101: the kubelet retries) and no first-layout
// allocation can commit after it. A pool fenced earlier (its typed copy
// exists) is only marked again when something cleared its mark; changes
// an earlier version made to a fenced pool are not carried over.
//
// It reports how many keys it wrote; store.ErrConflict (wrapped) when snap
// is stale.
func fence(ctx context.Context, s kv.Store, snap map[string]kv.KeyValue, rep *Report) (int, error) {
	lim := kv.LimitsOf(s)
	var conds []kv.Cond
	var ops []kv.Op
	written, copies, marks := 0, 0, 0 // copies and marks: of the pending transaction
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		if _, err := kv.TxnRevision(ctx, s, conds, ops); err != nil {
			return err
		}
		written += len(ops)
		rep.Pools, rep.Fenced = rep.Pools+copies, rep.Fenced+marks
		conds, ops, copies, marks = nil, nil, 0, 0
		return nil
	}
	for _, key := range sortedKeys(snap) {
		if !strings.HasPrefix(key, firstPoolPrefix) {
			continue
		}
		e := snap[key]
		name := strings.TrimPrefix(key, firstPoolPrefix)
		marked, ok, err := markedPool(e)
		if err != nil {
			return written, err
		}
		var c []kv.Cond
		var o []kv.Op
		tkey := kvbacked.PoolKey(name)
		_, copied := snap[tkey]
		if !copied {
			c = append(c, kv.Cond{Key: tkey})
			o = append(o, kv.Op{Key: tkey, Value: e.Value})
		}
		if !ok {
			c = append(c, kv.Cond{Key: key, Version: e.Version})
			o = append(o, kv.Op{Key: key, Value: marked})
		}
		if len(o) == 0 {
			continue
		}
		if len(ops) > 0 && !lim.Fits(append(conds, c...), append(ops, o...)) {
			if err := flush(); err != nil {
				return written, err
			}
		}
		conds, ops = append(conds, c...), append(ops, o...)
		if !copied {
			copies++
		}
		if !ok {
			marks++
		}
	}
	err := flush()
	return written, err
}

// markedPool returns a first-layout pool's fenced value, and whether e
// already holds it.
func markedPool(e kv.KeyValue) ([]byte, bool, error) {
	var p map[string]json.RawMessage
	if err := json.Unmarshal(e.Value, &p); err != nil || p == nil {
		return nil, false, fmt.Errorf("%w: migrate: %s: not a pool: %v", store.ErrCorrupt, e.Key, err)
	}
	var deleting bool
	var origin string
	_ = json.Unmarshal(p["deleting"], &deleting)
	_ = json.Unmarshal(p["origin"], &origin)
	if deleting && origin != "import" {
		return e.Value, true, nil
	}
	p["deleting"] = json.RawMessage("true")
	if origin == "import" {
		p["origin"] = json.RawMessage(`"` + fencedOrigin + `"`)
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, false, fmt.Errorf("%w: migrate: %s: %v", store.ErrCorrupt, e.Key, err)
	}
	return b, false, nil
}

// fenced reports whether every first-layout pool of snap is fenced (its
// typed copy exists and its key is marked).
func fenced(snap map[string]kv.KeyValue) bool {
	for key, e := range snap {
		if !strings.HasPrefix(key, firstPoolPrefix) {
			continue
		}
		if _, copied := snap[kvbacked.PoolKey(strings.TrimPrefix(key, firstPoolPrefix))]; !copied {
			return false
		}
		if _, ok, err := markedPool(e); err != nil || !ok {
			return false
		}
	}
	return true
}
