package store

import (
	"cmp"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// A node object is stored in parts, so that a write carries what changed
// and not the whole node: its head (the loans), one part per block (the
// block's state: pool, CIDR, free queue) and its handle records. Each
// backend keys the parts its own way (docs/STORAGE.md); every part has a
// version of its own, and an UpdateNode compares-and-swaps exactly the
// parts it changes, at the versions its caller read them at.
//
// Parts is what a backend read or wrote of one node object: each part's
// version. A Node read from or returned by a backend carries them (with
// the content it was stored with), and Changes compares a changed copy
// against them.
type Parts struct {
	// Head is the version of the node's head; "" when it has none stored.
	Head Version
	// Blocks is the version of each block's part.
	Blocks map[BlockRef]Version
	// Records is the version of each handle record's part, for backends
	// that store records on their own ("" where records live in their
	// blocks' parts).
	Records map[string]Version
}

// stored is what a Node holds of its stored state: the parts' versions
// and the object as they store it. Its slices are the caller's: a Node's
// blocks, records and loans are never changed in place once stored
// (the edits, nodeedit.go, never change an element of a list they are
// given; an append writes past its end), so holding them costs no copy.
type stored struct {
	parts   Parts
	blocks  []ipam.Block
	handles []ipam.Handle
	loans   []Loan
}

// AsStored returns n as stored by a backend with parts p: a later Changes
// of a copy of it names what the copy changed. Its Version is the
// composite of p (CompositeVersion).
func AsStored(n Node, p Parts) Node {
	n = AsStoredAt(n, p, CompositeVersion(p))
	return n
}

// AsStoredAt is AsStored for a backend whose node object's Version is v
// (kept whole or by its head's version) rather than the composite of p.
func AsStoredAt(n Node, p Parts, v Version) Node {
	n.stored = &stored{parts: p, blocks: n.Blocks, handles: n.Handles, loans: n.Loans}
	e := &editLog{handles: n.Handles, blocks: n.Blocks}
	if n.edits != nil {
		// The records' spare capacity stays with them.
		e.spare, e.owner, e.index = n.edits.spare, n.edits.owner, n.edits.index
	}
	if e.index == nil {
		e.index = &idIndex{}
	}
	n.edits = e
	n.Version = v
	return n
}

// StoredParts returns the parts n was read or written with, and false for
// a node object that was never stored.
func (n Node) StoredParts() (Parts, bool) {
	if n.stored == nil {
		return Parts{}, false
	}
	return n.stored.parts, true
}

// CompositeVersion is the Version of a node object stored in parts p: it
// changes whenever any part's version changes, and is equal for equal
// parts, so that callers keep comparing a node's Version for equality.
func CompositeVersion(p Parts) Version {
	if p.Head == "" && len(p.Blocks) == 0 && len(p.Records) == 0 {
		return ""
	}
	h := fnv.New64a()
	write := func(s string) {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	write(string(p.Head))
	for _, ref := range slices.SortedFunc(mapKeys(p.Blocks), BlockRef.Compare) {
		write(ref.String())
		write(string(p.Blocks[ref]))
	}
	for _, id := range slices.Sorted(mapKeys(p.Records)) {
		write(id)
		write(string(p.Records[id]))
	}
	return Version(formatHex(h.Sum64()))
}

// NodeChange is what a write of a node object changes against the parts
// it was read with: what a backend writes, each part compared-and-swapped
// at the version in Parts.
type NodeChange struct {
	// Node is the object's name.
	Node string
	// Parts are the versions the change is made against (empty for an
	// object never stored).
	Parts Parts
	// Head: the loans changed (or the head is new).
	Head bool
	// Blocks are the blocks whose state changed, or that hold an address
	// of a changed, new or dropped record, sorted; each is put.
	Blocks []BlockRef
	// Removed are the blocks the object no longer holds, sorted.
	Removed []BlockRef
	// Records are the records new or changed, by ID, sorted.
	Records []string
	// Dropped are the records the object no longer holds, sorted.
	Dropped []string
}

// Empty reports whether c writes nothing.
func (c NodeChange) Empty() bool {
	return !c.Head && len(c.Blocks) == 0 && len(c.Removed) == 0 && len(c.Records) == 0 && len(c.Dropped) == 0
}

// Changes validates what n changes and returns it, against the state n
// was read with (everything, validated whole, for an object never
// stored). For an object changed by its edits alone (nodeedit.go) the
// cost is bounded by what they touched: the records and blocks they
// logged are compared and validated, the others not looked at. Otherwise
// (FullChanges) it is a comparison per block and per record and the
// validation of the blocks and records that changed. Nothing is encoded.
// What did not change was valid when it was read or written.
func Changes(n Node) (NodeChange, error) {
	if e := n.tracked(); e != nil {
		return n.loggedChanges(e)
	}
	return FullChanges(n)
}

// FullChanges is Changes found by comparing every block and record of n
// with the state n was stored with, whatever edits made n: what Changes
// takes from the edit log must equal it (tests hold it).
func FullChanges(n Node) (NodeChange, error) {
	s := n.stored
	if s == nil {
		if err := n.Validate(); err != nil {
			return NodeChange{}, err
		}
		s = &stored{}
	}
	c := NodeChange{Node: n.Name, Parts: s.parts}
	if err := ValidName("node", n.Name); err != nil {
		return NodeChange{}, err
	}
	idx, err := n.blockIndex()
	if err != nil {
		return NodeChange{}, err
	}
	touched := map[BlockRef]bool{}
	oldBlocks := make(map[BlockRef]int, len(s.blocks))
	for i, b := range s.blocks {
		ref := BlockRef{b.Pool, b.CIDR}
		oldBlocks[ref] = i
		if _, ok := idx[ref]; !ok {
			c.Removed = append(c.Removed, ref)
		}
	}
	for ref, i := range idx {
		if j, ok := oldBlocks[ref]; !ok || s.blocks[j].Node != n.Blocks[i].Node || !slices.Equal(s.blocks[j].Free, n.Blocks[i].Free) {
			touched[ref] = true
		}
	}
	changed, dropped := diffRecords(s.handles, n.Handles)
	touch := func(h *ipam.Handle) {
		for _, ip := range h.IPs {
			if ref := (BlockRef{ip.Pool, ip.Block}); hasRef(idx, ref) {
				touched[ref] = true
			}
		}
	}
	for _, ch := range changed {
		h := &n.Handles[ch.cur]
		if err := n.checkRecord(h, idx); err != nil {
			return NodeChange{}, err
		}
		if ch.old < 0 && countID(n.Handles, h.ID) > 1 {
			return NodeChange{}, n.invalid("handle %q recorded twice", h.ID)
		}
		c.Records = append(c.Records, h.ID)
		touch(h)
		if ch.old >= 0 {
			touch(&s.handles[ch.old])
		}
	}
	for _, i := range dropped {
		c.Dropped = append(c.Dropped, s.handles[i].ID)
		touch(&s.handles[i])
	}
	if err := n.checkBlocks(touched, c.Removed, idx); err != nil {
		return NodeChange{}, err
	}
	return n.completeChange(c, s, touched)
}

// blockIndex indexes n's blocks by ref, refusing one held twice.
func (n Node) blockIndex() (map[BlockRef]int, error) {
	idx := make(map[BlockRef]int, len(n.Blocks))
	for i, b := range n.Blocks {
		ref := BlockRef{b.Pool, b.CIDR}
		if _, dup := idx[ref]; dup {
			return nil, n.invalid("block %s twice", ref)
		}
		idx[ref] = i
	}
	return idx, nil
}

// checkRecord validates one record of n: an ID, a node, addresses, each
// once, in a block n holds and owned there by the record.
func (n Node) checkRecord(h *ipam.Handle, idx map[BlockRef]int) error {
	switch {
	case h.ID == "":
		return n.invalid("a handle record without an ID")
	case h.Node == "":
		return n.invalid("handle %q names no node", h.ID)
	case len(h.IPs) == 0:
		return n.invalid("handle %q holds no address here", h.ID)
	}
	for j, ip := range h.IPs {
		ref := BlockRef{ip.Pool, ip.Block}
		i, ok := idx[ref]
		if !ok || !ip.Block.Contains(ip.Addr) {
			return n.invalid("handle %q holds %s in block %s, which this object does not hold", h.ID, ip.Addr, ref)
		}
		if slices.ContainsFunc(h.IPs[:j], func(o ipam.HandleIP) bool { return o.Addr == ip.Addr && o.Pool == ip.Pool }) {
			return n.invalid("handle %q holds %s twice", h.ID, ip.Addr)
		}
		if owner := n.Blocks[i].Owner(ip.Addr); owner != h.ID {
			return n.invalid("block %s gives %s to %q, the records to %q", ref, ip.Addr, owner, h.ID)
		}
	}
	return nil
}

// checkBlocks validates the blocks a change writes, and that no record
// holds an address in a block the change removes: each touched block is
// valid, of this node, and its owners are exactly the addresses the
// records list in it.
func (n Node) checkBlocks(touched map[BlockRef]bool, removed []BlockRef, idx map[BlockRef]int) error {
	if len(touched) == 0 && len(removed) == 0 {
		return nil
	}
	counts := make(map[BlockRef]int, len(touched))
	for ref := range touched {
		b := n.Blocks[idx[ref]]
		if err := ValidName("pool", b.Pool); err != nil {
			return n.invalid("block %s: %v", b.CIDR, err)
		}
		if b.Node != n.Name {
			return n.invalid("block %s is affine to node %q", ref, b.Node)
		}
		if err := b.Validate(); err != nil {
			return n.invalid("%v", err)
		}
	}
	for hi := range n.Handles {
		h := &n.Handles[hi]
		for _, ip := range h.IPs {
			ref := BlockRef{ip.Pool, ip.Block}
			if slices.Contains(removed, ref) {
				return n.invalid("handle %q holds %s in block %s, which this object does not hold", h.ID, ip.Addr, ref)
			}
			if !touched[ref] {
				continue
			}
			if owner := n.Blocks[idx[ref]].Owner(ip.Addr); owner != h.ID {
				return n.invalid("block %s gives %s to %q, the records to %q", ref, ip.Addr, owner, h.ID)
			}
			counts[ref]++
		}
	}
	for ref := range touched {
		if b := n.Blocks[idx[ref]]; counts[ref] != len(b.Owners) {
			return n.invalid("block %s lists %d owners, the records %d", ref, len(b.Owners), counts[ref])
		}
	}
	return nil
}

func hasRef(idx map[BlockRef]int, ref BlockRef) bool {
	_, ok := idx[ref]
	return ok
}

func countID(hs []ipam.Handle, id string) int {
	k := 0
	for i := range hs {
		if hs[i].ID == id {
			k++
		}
	}
	return k
}

// recordChange is a record of the new state that differs from the old:
// its index in the new records and in the old (-1: new).
type recordChange struct{ cur, old int }

// diffRecords compares two lists of records, in the order a node object
// keeps them: walked side by side, a record inserted or removed anywhere
// costs one look ahead; anything else (records reordered) is resolved
// by indexing what is left. It returns the records of cur that are new
// or differ, and the indexes of old's records that cur lacks.
func diffRecords(old, cur []ipam.Handle) (changed []recordChange, dropped []int) {
	i, j := 0, 0
	for i < len(old) && j < len(cur) {
		switch {
		case old[i].ID == cur[j].ID:
			if !sameRecord(&old[i], &cur[j]) {
				changed = append(changed, recordChange{j, i})
			}
			i, j = i+1, j+1
		case i+1 < len(old) && old[i+1].ID == cur[j].ID:
			dropped = append(dropped, i)
			i++
		case j+1 < len(cur) && old[i].ID == cur[j+1].ID:
			changed = append(changed, recordChange{j, -1})
			j++
		default:
			c, d := diffByIndex(old[i:], cur[j:], i, j)
			return append(changed, c...), append(dropped, d...)
		}
	}
	for ; j < len(cur); j++ {
		changed = append(changed, recordChange{j, -1})
	}
	for ; i < len(old); i++ {
		dropped = append(dropped, i)
	}
	return reconcile(old, cur, changed, dropped)
}

// diffByIndex is diffRecords by an index of old's IDs; io and jo are the
// slices' offsets in the whole lists.
func diffByIndex(old, cur []ipam.Handle, io, jo int) (changed []recordChange, dropped []int) {
	at := make(map[string]int, len(old))
	for i := range old {
		at[old[i].ID] = i
	}
	seen := make([]bool, len(old))
	for j := range cur {
		i, ok := at[cur[j].ID]
		switch {
		case !ok || seen[i]:
			changed = append(changed, recordChange{jo + j, -1})
		case !sameRecord(&old[i], &cur[j]):
			changed = append(changed, recordChange{jo + j, io + i})
			seen[i] = true
		default:
			seen[i] = true
		}
	}
	for i := range old {
		if !seen[i] {
			dropped = append(dropped, io+i)
		}
	}
	return changed, dropped
}

// reconcile turns a record the side-by-side walk found dropped in one
// place and new in another (records reordered) into one change, or none
// when it is equal.
func reconcile(old, cur []ipam.Handle, changed []recordChange, dropped []int) ([]recordChange, []int) {
	if len(dropped) == 0 || !slices.ContainsFunc(changed, func(c recordChange) bool { return c.old < 0 }) {
		return changed, dropped
	}
	gone := make(map[string]int, len(dropped))
	for _, i := range dropped {
		gone[old[i].ID] = i
	}
	out := changed[:0]
	for _, c := range changed {
		if i, ok := gone[cur[c.cur].ID]; ok && c.old < 0 {
			delete(gone, cur[c.cur].ID)
			if sameRecord(&old[i], &cur[c.cur]) {
				continue
			}
			c.old = i
		}
		out = append(out, c)
	}
	dropped = dropped[:0]
	for _, i := range gone {
		dropped = append(dropped, i)
	}
	slices.Sort(dropped)
	return out, dropped
}

// sameRecord reports whether two records of one handle are equal in
// everything stored.
func sameRecord(a, b *ipam.Handle) bool {
	return a.ID == b.ID && a.Network == b.Network && a.ContainerID == b.ContainerID && a.IfName == b.IfName &&
		a.Node == b.Node && a.NetNS == b.NetNS && a.Namespace == b.Namespace && a.Pod == b.Pod &&
		a.PodUID == b.PodUID && a.Created.Equal(b.Created) && slices.Equal(a.IPs, b.IPs) &&
		a.Sticky == b.Sticky && a.Parked.Equal(b.Parked)
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func formatHex(v uint64) string {
	const digits = "0123456789abcdef"
	var b [16]byte
	for i := 15; i >= 0; i-- {
		b[i] = digits[v&15]
		v >>= 4
	}
	return string(b[:])
}

// Normalized returns n as a comparison sees it: blocks sorted by ref,
// records by ID, loans by handle then lender, and no memory of how it
// was stored. Backends return a node object's blocks and records in an
// order of their own.
func (n Node) Normalized() Node {
	n.stored, n.edits = nil, nil
	n.Blocks = slices.SortedFunc(slices.Values(n.Blocks), func(a, b ipam.Block) int {
		return BlockRef{a.Pool, a.CIDR}.Compare(BlockRef{b.Pool, b.CIDR})
	})
	n.Handles = slices.SortedFunc(slices.Values(n.Handles), func(a, b ipam.Handle) int { return strings.Compare(a.ID, b.ID) })
	n.Loans = slices.SortedFunc(slices.Values(n.Loans), func(a, b Loan) int {
		return cmp.Or(strings.Compare(a.Handle, b.Handle), strings.Compare(a.Lender, b.Lender))
	})
	return n
}

// completeChange checks n's loans and completes c, the change of n
// against s that touches the blocks touched: the head when the loans
// changed (or were never stored), every list sorted.
func (n Node) completeChange(c NodeChange, s *stored, touched map[BlockRef]bool) (NodeChange, error) {
	if err := n.validateLoans(); err != nil {
		return NodeChange{}, err
	}
	c.Head = s.parts.Head == "" || !slices.Equal(s.loans, n.Loans)
	c.Blocks = slices.SortedFunc(mapKeys(touched), BlockRef.Compare)
	slices.SortFunc(c.Removed, BlockRef.Compare)
	slices.Sort(c.Records)
	slices.Sort(c.Dropped)
	return c, nil
}
