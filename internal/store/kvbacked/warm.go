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
	// Hint, when usable for Node, stands for the node object: the read
	// skips it and takes the hint instead when the store has the hint's
	// identity (NodeHint).
	Hint *NodeHint
}

// Warmed is what ReadLayoutWarm found of Warm's objects. OK is false when
// it read none: no Warm, a store not of the typed layout (to be migrated
// first), or an object that did not decode (left to the reads that follow,
// which report it).
type Warmed struct {
	OK bool
	// Node is the node object; Version "" when there is none, Name ""
	// when it was not read (a store that is not a kv.PrefixGetter).
	Node store.Node
	// Pools are those of Warm's pools that exist.
	Pools []store.Pool
	// Store is the store's identity ("" when it has none yet).
	Store string
	// Unread says nothing was read: everything came from Warm.Hint
	// (Store.TakeHint).
	Unread bool
	// Hint is Node as stored (Value nil when there is none), for
	// Store.Track; Hinted says it came from Warm.Hint, not from the store.
	Hint   NodeHint
	Hinted bool
	// Claims are claims of Node's node: read with the marker (those the
	// hint named), or taken from the hint and required by the first write
	// (Store.TakeHint).
	Claims []store.Claim
}

// ReadLayoutWarm is ReadLayout that reads w's objects in the same Get,
// each pool with its reservations.
// The node object, kept as a prefix of parts, is read with them when s
// is a kv.PrefixGetter (one request, one revision) and left to the
// caller otherwise (Warmed.Node without a Name). Names no object can have
// are not read. With a usable w.Hint the node object is not read unless
// the store turns out not to be the hint's (the read is made again
// without the hint), and the claims the hint names are read with the
// rest: those that still name the node are returned.
func ReadLayoutWarm(ctx context.Context, s kv.Store, w Warm) (Layout, Warmed, error) {
	keys := []string{MarkerKey, storeKey}
	node := w.Node != "" && store.ValidName("node", w.Node) == nil
	hinted := node && w.Hint.usable(w.Node)
	pg, prefixed := s.(kv.PrefixGetter)
	if node && !hinted && !prefixed {
		// The node object is a prefix of parts, which Get cannot read
		// with the rest: the opener reads it next.
		node = false
	}
	pools := 0
	for _, p := range w.Pools {
		if store.ValidName("pool", p) == nil {
			keys = append(keys, poolKey(p), reservationsKey(p))
			pools += 2
		}
	}
	var claims []store.BlockRef
	if hinted {
		for _, c := range w.Hint.Claims {
			if _, err := store.EncodeClaim(store.Claim{BlockRef: c.Ref, Node: w.Node}); err == nil && len(claims) < maxGuardClaims {
				keys = append(keys, claimKey(c.Ref))
				claims = append(claims, c.Ref)
			}
		}
	}
	var es, parts []kv.KeyValue
	var err error
	if node && !hinted {
		es, parts, err = pg.GetWithPrefix(ctx, keys, nodePartsPrefix(w.Node))
	} else {
		es, err = s.Get(ctx, keys...)
	}
	if err != nil {
		return LayoutUnmarked, Warmed{}, mapErr("read the layout marker", err)
	}
	layout, err := layoutOf(es[0])
	if err != nil || layout != LayoutTyped || !node && len(es) == 2 {
		return layout, Warmed{}, err
	}
	out := Warmed{OK: true, Store: string(es[1].Value)}
	out.Hint = NodeHint{Store: out.Store, Layout: version(es[0].Version), Node: w.Node}
	if es[1].Version != 0 {
		out.Hint.StoreAt = version(es[1].Version)
	}
	es = es[2:]
	if hinted && out.Store != w.Hint.Store {
		// Not the hint's store: read again, the object too, without it.
		w.Hint = nil
		return ReadLayoutWarm(ctx, s, w)
	}
	if node {
		out.Node = store.Node{Name: w.Node}
		switch {
		case hinted:
			n, err := hintedNode(w.Node, w.Hint.Value, w.Hint.Version)
			if err != nil {
				return layout, Warmed{}, nil
			}
			out.Node, out.Hinted = n, true
			out.Hint.Version, out.Hint.Value = w.Hint.Version, w.Hint.Value
		case len(parts) > 0:
			n, err := decodeParts(w.Node, parts)
			if err != nil {
				return layout, Warmed{}, nil
			}
			// Encoded only when a tracking store is asked for its hint
			// (Track, Tracked): most opens keep none.
			out.Node = n
			out.Hint.Version, out.Hint.read = n.Version, &out.Node
		}
	}
	for i := 0; i < pools; i += 2 {
		e, r := es[i], es[i+1]
		if e.Version == 0 {
			continue
		}
		p, err := decodePoolWith(e, r)
		if err != nil {
			return layout, Warmed{}, nil
		}
		out.Pools = append(out.Pools, p)
		out.Hint.Pools = append(out.Hint.Pools, PoolHint{Name: p.Spec.Name, Version: p.Version, Value: e.Value, Reserved: r.Value})
	}
	for i, e := range es[pools:] {
		if e.Version == 0 {
			continue
		}
		c, err := decodeClaim(e, "")
		if err != nil || c.BlockRef != claims[i] || c.Node != w.Node {
			continue
		}
		out.Claims = append(out.Claims, c)
		out.Hint.Claims = append(out.Hint.Claims, ClaimHint{Ref: c.BlockRef, Version: c.Version})
	}
	return layout, out, nil
}
