package store

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// loggedChanges is Changes of an object changed by its edits alone (e is
// its log): the records and blocks the edits touched are compared with
// their state as stored and validated; the others, as stored and
// untouched, were valid and still agree with each other. Besides the
// checks of each changed record (checkRecord) and each written block,
// every address whose owner an edit changed, and every address an edited
// record no longer lists, must agree with the records: a record the
// edits did not touch still lists what it listed.
func (n Node) loggedChanges(e *editLog) (NodeChange, error) {
	s := n.stored
	if err := ValidName("node", n.Name); err != nil {
		return NodeChange{}, err
	}
	idx := n.loggedBlocks(e)
	c := NodeChange{Node: n.Name, Parts: s.parts}
	touched := map[BlockRef]bool{}
	for ref, b := range e.blockEdits {
		i, held := idx[ref]
		switch {
		case !held && b.existed:
			c.Removed = append(c.Removed, ref)
		case held && (!b.existed || b.before.Node != n.Blocks[i].Node || !slices.Equal(b.before.Free, n.Blocks[i].Free)):
			touched[ref] = true
		}
	}
	touch := func(h *ipam.Handle) {
		for _, ip := range h.IPs {
			if ref := (BlockRef{ip.Pool, ip.Block}); hasRef(idx, ref) {
				touched[ref] = true
			}
		}
	}
	for id, r := range e.records {
		if r.at >= 0 && (r.at >= len(n.Handles) || n.Handles[r.at].ID != id) {
			return FullChanges(n) // a record's ID changed in place
		}
		switch cur := n.record(r); {
		case cur == nil && !r.existed:
		case cur == nil:
			c.Dropped = append(c.Dropped, id)
			touch(&r.before)
		case !r.existed || !sameRecord(&r.before, cur):
			if err := n.checkRecord(cur, idx); err != nil {
				return NodeChange{}, err
			}
			c.Records = append(c.Records, id)
			touch(cur)
			if r.existed {
				touch(&r.before)
			}
		}
	}
	if err := n.checkEdited(e, idx, touched); err != nil {
		return NodeChange{}, err
	}
	return n.completeChange(c, s, touched)
}

// loggedBlocks indexes, by ref, the blocks n holds of those the edits of
// e touched or that hold an address of a record they touched, before or
// after: every block loggedChanges looks at (edits never hold a ref
// twice).
func (n Node) loggedBlocks(e *editLog) map[BlockRef]int {
	idx := make(map[BlockRef]int, len(e.blockEdits)+2)
	need := func(ref BlockRef) {
		if _, ok := idx[ref]; !ok {
			if i := n.blockIndexOf(ref); i >= 0 {
				idx[ref] = i
			}
		}
	}
	for ref := range e.blockEdits {
		need(ref)
	}
	for _, r := range e.records {
		if h := n.record(r); h != nil {
			for _, ip := range h.IPs {
				need(BlockRef{ip.Pool, ip.Block})
			}
		}
		for _, ip := range r.before.IPs {
			need(BlockRef{ip.Pool, ip.Block})
		}
	}
	return idx
}

// record returns the record r logs as it is now in n, nil when dropped.
func (n Node) record(r recordEdit) *ipam.Handle {
	if r.at < 0 {
		return nil
	}
	return &n.Handles[r.at]
}

// checkEdited checks what the edits of e changed in the blocks' owners
// against the records: each block edited or written is valid and of this
// node; an address given to a handle is listed by that handle's edited
// record; an address taken from a handle (freed, given to another, its
// block removed) is no longer listed by that handle's record, which must
// then have been edited; an address an edited record no longer lists is
// no longer its in its block.
func (n Node) checkEdited(e *editLog, idx map[BlockRef]int, touched map[BlockRef]bool) error {
	check := maps.Clone(touched)
	for ref := range e.blockEdits {
		check[ref] = true
	}
	lists := func(id string, ref BlockRef, addr netip.Addr) (logged, listed bool) {
		r, ok := e.records[id]
		if !ok {
			return false, false
		}
		h := n.record(r)
		return true, h != nil && slices.ContainsFunc(h.IPs, func(ip ipam.HandleIP) bool {
			return ip.Addr == addr && ip.Pool == ref.Pool && ip.Block == ref.CIDR
		})
	}
	for ref := range check {
		i, held := idx[ref]
		var cur, before ipam.Block
		if held {
			cur = n.Blocks[i]
			if err := ValidName("pool", cur.Pool); err != nil {
				return n.invalid("block %s: %v", cur.CIDR, err)
			}
			if cur.Node != n.Name {
				return n.invalid("block %s is affine to node %q", ref, cur.Node)
			}
			if err := cur.Validate(); err != nil {
				return n.invalid("%v", err)
			}
		}
		b, edited := e.blockEdits[ref]
		switch {
		case edited && b.existed:
			before = b.before
		case !edited:
			before = cur
		}
		for ord, was := range before.Owners {
			if now := cur.Owners[ord]; now != was {
				addr := before.Addr(ord)
				if logged, listed := lists(was, ref, addr); !logged || listed {
					return n.invalid("block %s gives %s to %q, the records to %q", ref, addr, now, was)
				}
			}
		}
		for ord, now := range cur.Owners {
			if was := before.Owners[ord]; now != was {
				if _, listed := lists(now, ref, cur.Addr(ord)); !listed {
					return n.invalid("block %s gives %s to %q, the records to %q", ref, cur.Addr(ord), now, was)
				}
			}
		}
	}
	for id, r := range e.records {
		if !r.existed {
			continue
		}
		h := n.record(r)
		for _, ip := range r.before.IPs {
			if h != nil && slices.Contains(h.IPs, ip) {
				continue
			}
			ref := BlockRef{ip.Pool, ip.Block}
			if i, held := idx[ref]; held && n.Blocks[i].Owner(ip.Addr) == id {
				return n.invalid("block %s gives %s to %q, the records to nobody", ref, ip.Addr, id)
			}
		}
	}
	return nil
}
