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
// (nodealloc copies before it changes anything), so holding them costs
// no copy.
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
	n.stored = &stored{parts: p, blocks: n.Blocks, handles: n.Handles, loans: n.Loans}
	n.Version = CompositeVersion(p)
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

// Changes validates n and returns what writing it changes against the
// state it was read with (everything, for an object never stored). The
// cost is a comparison per block and per record, without encoding
// anything.
func Changes(n Node) (NodeChange, error) {
	if err := n.Validate(); err != nil {
		return NodeChange{}, err
	}
	c := NodeChange{Node: n.Name}
	s := n.stored
	if s == nil {
		s = &stored{}
	} else {
		c.Parts = s.parts
	}
	touched := map[BlockRef]bool{}
	oldBlocks := make(map[BlockRef]int, len(s.blocks))
	for i, b := range s.blocks {
		oldBlocks[BlockRef{b.Pool, b.CIDR}] = i
	}
	newBlocks := make(map[BlockRef]bool, len(n.Blocks))
	for _, b := range n.Blocks {
		ref := BlockRef{b.Pool, b.CIDR}
		newBlocks[ref] = true
		if i, ok := oldBlocks[ref]; !ok || !slices.Equal(s.blocks[i].Free, b.Free) {
			touched[ref] = true
		}
	}
	for ref := range oldBlocks {
		if !newBlocks[ref] {
			c.Removed = append(c.Removed, ref)
		}
	}
	oldRecords := make(map[string]int, len(s.handles))
	for i, h := range s.handles {
		oldRecords[h.ID] = i
	}
	touch := func(h ipam.Handle) {
		for _, ip := range h.IPs {
			if ref := (BlockRef{ip.Pool, ip.Block}); newBlocks[ref] {
				touched[ref] = true
			}
		}
	}
	seen := make(map[string]bool, len(n.Handles))
	for _, h := range n.Handles {
		seen[h.ID] = true
		j, ok := oldRecords[h.ID]
		if ok && sameRecord(&s.handles[j], &h) {
			continue
		}
		c.Records = append(c.Records, h.ID)
		touch(h)
		if ok {
			touch(s.handles[j])
		}
	}
	for _, h := range s.handles {
		if !seen[h.ID] {
			c.Dropped = append(c.Dropped, h.ID)
			touch(h)
		}
	}
	c.Head = s.parts.Head == "" || !slices.Equal(s.loans, n.Loans)
	c.Blocks = slices.SortedFunc(mapKeys(touched), BlockRef.Compare)
	slices.SortFunc(c.Removed, BlockRef.Compare)
	slices.Sort(c.Records)
	slices.Sort(c.Dropped)
	return c, nil
}

// sameRecord reports whether two records of one handle are equal in
// everything stored.
func sameRecord(a, b *ipam.Handle) bool {
	return a.ID == b.ID && a.Network == b.Network && a.ContainerID == b.ContainerID && a.IfName == b.IfName &&
		a.Node == b.Node && a.NetNS == b.NetNS && a.Namespace == b.Namespace && a.Pod == b.Pod &&
		a.PodUID == b.PodUID && a.Created.Equal(b.Created) && slices.Equal(a.IPs, b.IPs)
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
	n.stored = nil
	n.Blocks = slices.SortedFunc(slices.Values(n.Blocks), func(a, b ipam.Block) int {
		return BlockRef{a.Pool, a.CIDR}.Compare(BlockRef{b.Pool, b.CIDR})
	})
	n.Handles = slices.SortedFunc(slices.Values(n.Handles), func(a, b ipam.Handle) int { return strings.Compare(a.ID, b.ID) })
	n.Loans = slices.SortedFunc(slices.Values(n.Loans), func(a, b Loan) int {
		return cmp.Or(strings.Compare(a.Handle, b.Handle), strings.Compare(a.Lender, b.Lender))
	})
	return n
}
