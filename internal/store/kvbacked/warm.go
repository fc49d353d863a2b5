package kvbacked

import (
	"context"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// Warm names the objects an opener reads first: a node object and pools.
// ReadLayoutWarm reads them with the layout marker, in one request — a
// plugin's ADD on etcd then pays one round trip for its reads instead of
// three (marker, node object, pool).
type Warm struct {
	Node  string
	Pools []string
}

// Warmed is what ReadLayoutWarm found of Warm's objects. OK is false when
// it read none: no Warm, a store not of the typed layout (to be migrated
// first), or an object that did not decode (left to the reads that follow,
// which report it).
type Warmed struct {
	OK bool
	// Node is the node object; Version "" when there is none.
	Node store.Node
	// Pools are those of Warm's pools that exist.
	Pools []store.Pool
}

// ReadLayoutWarm is ReadLayout that reads w's objects in the same Get.
// Names no object can have are not read.
func ReadLayoutWarm(ctx context.Context, s kv.Store, w Warm) (Layout, Warmed, error) {
	keys := []string{layoutKey}
	node := w.Node != "" && store.ValidName("node", w.Node) == nil
	if node {
		keys = append(keys, nodeKey(w.Node))
	}
	for _, p := range w.Pools {
		if store.ValidName("pool", p) == nil {
			keys = append(keys, poolKey(p))
		}
	}
	es, err := s.Get(ctx, keys...)
	if err != nil {
		return LayoutUnmarked, Warmed{}, mapErr("read the layout marker", err)
	}
	layout, err := layoutOf(es[0])
	if err != nil || layout != LayoutTyped || len(es) == 1 {
		return layout, Warmed{}, err
	}
	out := Warmed{OK: true}
	es = es[1:]
	if node {
		out.Node = store.Node{Name: w.Node}
		if es[0].Version != 0 {
			if out.Node, err = decodeNode(w.Node, es[0]); err != nil {
				return layout, Warmed{}, nil
			}
		}
		es = es[1:]
	}
	for _, e := range es {
		if e.Version == 0 {
			continue
		}
		p, err := decodePool(e)
		if err != nil {
			return layout, Warmed{}, nil
		}
		out.Pools = append(out.Pools, p)
	}
	return layout, out, nil
}
