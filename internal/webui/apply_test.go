package webui

import (
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
)

// The map follows etcd through storeview.View and takes each change of
// the view whole (viewFeed). Tests that build a model object by object
// feed it events instead, as a watch of node objects would.

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
