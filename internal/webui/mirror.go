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
	// bad are the pools and claims that cannot be decoded.
	bad []badObject
}

// badObject is an object that cannot be decoded, and why.
type badObject struct {
	what string
	err  error
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
	if len(m.handles) == 0 && len(m.blocks) == 0 {
		m.sizeFor(s)
	}
	// An object of the mirror is gone when s does not name it: when s
	// names as many objects as the mirror holds, all of them known, none
	// is (the common case: no set of names is built).
	known := 0
	for _, p := range s.pools {
		ps := m.pools[p.Spec.Name]
		if ps != nil {
			known++
		}
		if ps == nil || ps.version != p.Version {
			m.putPool(p, d)
		}
	}
	if known != len(m.pools) {
		seen := make(map[string]bool, len(s.pools))
		for _, p := range s.pools {
			seen[p.Spec.Name] = true
		}
		for name := range m.pools {
			if !seen[name] {
				m.delPool(name, d)
			}
		}
	}
	known = 0
	for _, c := range s.claims {
		cs := m.claims[c.BlockRef]
		if cs != nil {
			known++
		}
		if cs == nil || cs.version != c.Version {
			m.putClaim(c, d)
		}
	}
	if known != len(m.claims) {
		seen := make(map[store.BlockRef]bool, len(s.claims))
		for _, c := range s.claims {
			seen[c.BlockRef] = true
		}
		for ref := range m.claims {
			if !seen[ref] {
				m.delClaim(ref, d)
			}
		}
	}
	known = 0
	for _, n := range s.nodes {
		if m.nodes[n.Name] != nil {
			known++
		}
		switch {
		case n.Err != nil:
			m.badNode(n.Name, n.Version, n.Err, d)
		case n.Decoded:
			m.putNode(n.Node, d)
		}
	}
	if known != len(m.nodes) {
		seen := make(map[string]bool, len(s.nodes))
		for _, n := range s.nodes {
			seen[n.Name] = true
		}
		for name := range m.nodes {
			if !seen[name] {
				m.delNode(name, d)
			}
		}
	}
	// Pools and claims that cannot be decoded are those s names.
	badNow := make(map[string]bool, len(s.bad))
	for _, b := range s.bad {
		badNow[b.what] = true
		m.badLocked(b.what, b.err)
	}
	for what := range m.bad {
		if !strings.HasPrefix(what, "node ") && !badNow[what] {
			delete(m.bad, what)
		}
	}
	m.finishLocked(s.rev, d, true)
}

// sizeFor makes the empty mirror's maps the size of s (the first full
// read): they do not grow by steps while it is put.
func (m *model) sizeFor(s snapshot) {
	handles, blocks := 0, 0
	for _, n := range s.nodes {
		handles += len(n.Node.Handles)
		blocks += len(n.Node.Blocks)
	}
	m.handles = make(map[string]*handleState, handles)
	m.blocks = make(map[store.BlockRef]*blockState, max(blocks, len(s.claims)))
}
