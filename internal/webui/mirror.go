package webui

import (
	"context"
	"fmt"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
)

// snapshot is the datastore's objects as one read found them.
type snapshot struct {
	// rev is the store's revision read before the objects (0: the store
	// has none).
	rev    int64
	pools  []store.Pool
	claims []store.Claim
	// nodes lists every node object; only those the mirror did not hold
	// at their version are decoded (or carry the error decoding them).
	nodes []kvbacked.ScannedNode
}

// nodeScanner lists node objects decoding only the changed ones
// (kvbacked.Store).
type nodeScanner interface {
	ScanNodes(ctx context.Context, decode func(name string, v store.Version) bool) ([]kvbacked.ScannedNode, error)
}

// readSnapshot reads every pool, claim and node object of st; have is the
// version of every node object the mirror holds, which are not decoded
// again when unchanged.
func readSnapshot(ctx context.Context, st store.Store, have map[string]store.Version) (snapshot, error) {
	var s snapshot
	var err error
	if s.pools, err = st.ListPools(ctx); err != nil {
		return snapshot{}, fmt.Errorf("list pools: %w", err)
	}
	if s.claims, err = st.ListClaims(ctx, store.ClaimSelector{}); err != nil {
		return snapshot{}, fmt.Errorf("list claims: %w", err)
	}
	changed := func(name string, v store.Version) bool {
		h, ok := have[name]
		return !ok || h != v
	}
	if sc, ok := st.(nodeScanner); ok {
		if s.nodes, err = sc.ScanNodes(ctx, changed); err != nil {
			return snapshot{}, fmt.Errorf("list node objects: %w", err)
		}
		return s, nil
	}
	ns, err := st.ListNodes(ctx, store.NodeSelector{})
	if err != nil {
		return snapshot{}, fmt.Errorf("list node objects: %w", err)
	}
	s.nodes = make([]kvbacked.ScannedNode, len(ns))
	for i, n := range ns {
		s.nodes[i] = kvbacked.ScannedNode{Name: n.Name, Version: n.Version, Node: n, Decoded: changed(n.Name, n.Version)}
	}
	return s, nil
}

// replace makes the mirror the full state s: it applies what differs from
// the mirror (objects at another version, objects gone).
func (m *model) replace(s snapshot) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := newDirty()
	seenPools := make(map[string]bool, len(s.pools))
	for _, p := range s.pools {
		seenPools[p.Spec.Name] = true
		if ps := m.pools[p.Spec.Name]; ps == nil || ps.version != p.Version {
			m.putPool(p, d)
		}
	}
	for name := range m.pools {
		if !seenPools[name] {
			m.delPool(name, d)
		}
	}
	seenClaims := make(map[store.BlockRef]bool, len(s.claims))
	for _, c := range s.claims {
		seenClaims[c.BlockRef] = true
		if cs := m.claims[c.BlockRef]; cs == nil || cs.version != c.Version {
			m.putClaim(c, d)
		}
	}
	for ref := range m.claims {
		if !seenClaims[ref] {
			m.delClaim(ref, d)
		}
	}
	seenNodes := make(map[string]bool, len(s.nodes))
	for _, n := range s.nodes {
		seenNodes[n.Name] = true
		switch {
		case n.Err != nil:
			m.badNode(n.Name, n.Version, n.Err, d)
		case n.Decoded:
			m.putNode(n.Node, d)
		}
	}
	for name := range m.nodes {
		if !seenNodes[name] {
			m.delNode(name, d)
		}
	}
	// A full read lists pools and claims only when every one decodes.
	for what := range m.bad {
		if !strings.HasPrefix(what, "node ") {
			delete(m.bad, what)
		}
	}
	m.finishLocked(s.rev, d, true)
}

// apply applies the changes a watch reported at revision rev. Changes
// older than what the mirror holds are ignored, so replaying events the
// last full read already saw is harmless.
func (m *model) apply(rev int64, evs []kvbacked.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := newDirty()
	for _, ev := range evs {
		switch ev.Kind {
		case kvbacked.KindPool:
			name := ev.Pool.Spec.Name
			var have store.Version
			if ps := m.pools[name]; ps != nil {
				have = ps.version
			}
			applyEvent(have, ev, func() { m.delPool(name, d) }, func(err error) {
				m.delPool(name, d)
				m.badLocked(poolWhat(name), err)
			}, func() { m.putPool(ev.Pool, d) })
		case kvbacked.KindClaim:
			ref := ev.Claim.BlockRef
			var have store.Version
			if cs := m.claims[ref]; cs != nil {
				have = cs.version
			}
			applyEvent(have, ev, func() { m.delClaim(ref, d) }, func(err error) {
				m.delClaim(ref, d)
				m.badLocked(claimWhat(ref), err)
			}, func() { m.putClaim(ev.Claim, d) })
		case kvbacked.KindNode:
			name := ev.Node.Name
			var have store.Version
			if ns := m.nodes[name]; ns != nil {
				have = ns.version
			}
			applyEvent(have, ev, func() { m.delNode(name, d) }, func(err error) {
				m.badNode(name, ev.Node.Version, err, d)
			}, func() { m.putNode(ev.Node, d) })
		}
	}
	m.finishLocked(rev, d, false)
}

// applyEvent applies one watched event to an object the mirror holds at
// version have: nothing when the event is stale, bad for an object that
// cannot be decoded, del for a deletion, put otherwise.
func applyEvent(have store.Version, ev kvbacked.Event, del func(), bad func(error), put func()) {
	switch {
	case stale(have, ev):
	case ev.Err != nil:
		bad(ev.Err)
	case ev.Deleted:
		del()
	default:
		put()
	}
}

// stale reports whether ev is older than the state have the mirror holds
// (a deletion at the same revision as have is not).
func stale(have store.Version, ev kvbacked.Event) bool {
	h, ok := kvbacked.VersionRevision(have)
	if !ok {
		return false
	}
	if ev.Deleted {
		return h > ev.Rev
	}
	return h >= ev.Rev
}
