package store

import (
	"maps"
	"slices"
	"sync"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// A node object is changed by the edits below (package nodealloc makes
// every change of an allocation or release with them). Each returns a
// new Node and leaves its receiver as it was, at a cost bounded by what
// it changes: a record added is appended in place of a fresh copy of the
// records (records, unlike the object's other lists, grow with its
// pods), and the edit notes which records and blocks it touched, with
// their state before the first edit since the object was stored. Changes
// then takes what a write carries from that log, without comparing the
// object's other records and blocks. An object whose Blocks or Handles a
// caller set or changed otherwise (Normalized, nodealloc.Clone, a slice
// built by hand) is compared whole, as is one never stored.

// editLog is what the edits of a Node made since it was stored: the
// lists they left (a Node whose lists are other ones was changed
// otherwise), the first state of every record and block they touched,
// and where each record edited is now.
type editLog struct {
	// handles and blocks are the lists the last edit made.
	handles []ipam.Handle
	blocks  []ipam.Block
	// spare is handles' array at its full length; owner says who may use
	// the part after handles.
	spare []ipam.Handle
	owner *spareOwner
	// records holds, by ID, each record edited: as stored and its index
	// in handles now (-1: dropped).
	records map[string]recordEdit
	// blockEdits holds, by ref, each block edited: as stored.
	blockEdits map[BlockRef]blockEdit
	// untracked: the lists were changed otherwise; Changes compares the
	// object whole until it is stored again.
	untracked bool
	// index finds records by ID.
	index *idIndex
}

// recordEdit is a record's state before its first edit, and where it is.
type recordEdit struct {
	before  ipam.Handle
	existed bool
	at      int
}

// blockEdit is a block's state before its first edit.
type blockEdit struct {
	before  ipam.Block
	existed bool
}

// spareOwner guards the spare capacity after a records list: the first
// edit appending at index used takes it, any later one copies.
type spareOwner struct {
	mu   sync.Mutex
	used int
}

// maxLoggedEdits bounds the log: an object edited more than this between
// two writes (a batch, an import) is compared whole instead.
const maxLoggedEdits = 256

// sameList reports whether two slices are one list: same start, same
// length.
func sameList[T any](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	return len(a) == 0 || &a[0] == &b[0]
}

// log returns the edit log n's next edit extends: a copy of n's (the
// maps are shared until changed), or a fresh one, marked untracked when
// n's lists were changed otherwise.
func (n Node) log() editLog {
	if n.edits == nil {
		return editLog{handles: n.Handles, blocks: n.Blocks, index: &idIndex{}}
	}
	e := *n.edits
	if !sameList(e.handles, n.Handles) || !sameList(e.blocks, n.Blocks) {
		return editLog{handles: n.Handles, blocks: n.Blocks, untracked: true, index: e.index}
	}
	return e
}

// tracked returns n's edit log when Changes can take a write from it.
func (n Node) tracked() *editLog {
	e := n.edits
	if e == nil || n.stored == nil || e.untracked || !sameList(e.handles, n.Handles) || !sameList(e.blocks, n.Blocks) {
		return nil
	}
	return e
}

// finish returns n with the lists and log of e.
func (n Node) finish(e editLog) Node {
	if len(e.records)+len(e.blockEdits) > maxLoggedEdits {
		e.untracked = true
	}
	if e.untracked {
		e.records, e.blockEdits = nil, nil
	}
	n.Handles, n.Blocks = e.handles, e.blocks
	n.edits = &e
	return n
}

// noteRecord logs that the record of id at index at (in e.handles) is
// being edited; i is its index before the edit (-1: none).
func (e *editLog) noteRecord(id string, i, at int) {
	if e.untracked {
		return
	}
	r, ok := e.records[id]
	if !ok {
		r = recordEdit{existed: i >= 0}
		if i >= 0 {
			r.before = e.handles[i]
		}
	}
	r.at = at
	e.records = maps.Clone(e.records)
	if e.records == nil {
		e.records = map[string]recordEdit{}
	}
	e.records[id] = r
}

// noteBlock logs that the block ref (index i in e.blocks, -1: none) is
// being edited.
func (e *editLog) noteBlock(ref BlockRef, i int) {
	if e.untracked {
		return
	}
	if _, ok := e.blockEdits[ref]; ok {
		return
	}
	b := blockEdit{existed: i >= 0}
	if i >= 0 {
		b.before = e.blocks[i]
	}
	e.blockEdits = maps.Clone(e.blockEdits)
	if e.blockEdits == nil {
		e.blockEdits = map[BlockRef]blockEdit{}
	}
	e.blockEdits[ref] = b
}

// recordIndex returns the index of the record of id in n.Handles, or -1.
func (n Node) recordIndex(id string) int {
	if e := n.edits; e != nil && !e.untracked && sameList(e.handles, n.Handles) {
		if r, ok := e.records[id]; ok {
			return r.at
		}
	}
	if e := n.edits; e != nil && e.index != nil && len(n.Handles) >= minIndexed {
		return e.index.find(n.Handles, id)
	}
	for i := range n.Handles {
		if n.Handles[i].ID == id {
			return i
		}
	}
	return -1
}

// blockIndex returns the index of block ref in n.Blocks, or -1.
func (n Node) blockIndexOf(ref BlockRef) int {
	for i := range n.Blocks {
		if n.Blocks[i].Pool == ref.Pool && n.Blocks[i].CIDR == ref.CIDR {
			return i
		}
	}
	return -1
}

// PutBlock returns n holding b: in place of the block of b's ref, or
// added after the others.
func (n Node) PutBlock(b ipam.Block) Node {
	e := n.log()
	ref := BlockRef{b.Pool, b.CIDR}
	i := n.blockIndexOf(ref)
	e.noteBlock(ref, i)
	if i < 0 {
		e.blocks = append(slices.Clip(e.blocks), b)
	} else {
		e.blocks = slices.Clone(e.blocks)
		e.blocks[i] = b
	}
	return n.finish(e)
}

// DropBlock returns n without block ref (n itself when it holds none).
func (n Node) DropBlock(ref BlockRef) Node {
	i := n.blockIndexOf(ref)
	if i < 0 {
		return n
	}
	e := n.log()
	e.noteBlock(ref, i)
	e.blocks = slices.Delete(slices.Clone(e.blocks), i, i+1)
	return n.finish(e)
}

// PutRecord returns n holding record h: in place of the record of h.ID,
// or added after the others.
func (n Node) PutRecord(h ipam.Handle) Node {
	if i := n.recordIndex(h.ID); i >= 0 {
		return n.ReplaceRecord(h.ID, h)
	}
	e := n.log()
	at := len(e.handles)
	e.appendRecord(h)
	e.noteRecord(h.ID, -1, at)
	e.index.moved(n.Handles, e.handles, idAt{h.ID, at})
	return n.finish(e)
}

// appendRecord appends h to e.handles: in the spare capacity after them
// when no other edit took it, else in a larger copy.
func (e *editLog) appendRecord(h ipam.Handle) {
	l := len(e.handles)
	if o := e.owner; o != nil && !e.untracked && l < len(e.spare) && sameList(e.spare[:l], e.handles) {
		o.mu.Lock()
		free := o.used == l
		if free {
			o.used++
		}
		o.mu.Unlock()
		if free {
			e.spare[l] = h
			e.handles = e.spare[: l+1 : l+1]
			return
		}
	}
	e.spare = make([]ipam.Handle, max(2*l, 8))
	copy(e.spare, e.handles)
	e.spare[l] = h
	e.owner = &spareOwner{used: l + 1}
	e.handles = e.spare[: l+1 : l+1]
}

// ReplaceRecord returns n with the record of id replaced by h, at its
// place (h.ID may differ from id: a rename, and n must hold no other
// record of h.ID). It returns n when n holds no record of id.
func (n Node) ReplaceRecord(id string, h ipam.Handle) Node {
	i := n.recordIndex(id)
	if i < 0 {
		return n
	}
	e := n.log()
	if j := n.recordIndex(h.ID); h.ID != id && j >= 0 {
		e.untracked = true // two records of h.ID: FullChanges refuses it
	}
	e.noteRecord(id, i, -1)
	e.noteRecord(h.ID, -1, i)
	e.handles = slices.Clone(e.handles)
	e.handles[i] = h
	e.spare, e.owner = nil, nil
	e.index.moved(n.Handles, e.handles, idAt{id, -1}, idAt{h.ID, i})
	return n.finish(e)
}

// DropRecord returns n without the record of id (n itself when it holds
// none); the last record takes its place. The records are copied: the
// list of n keeps the record, and the spare capacity of the copy takes
// the next records added (an append after a list shortened in place
// would overwrite a record n still holds, so it would copy instead).
func (n Node) DropRecord(id string) Node {
	i := n.recordIndex(id)
	if i < 0 {
		return n
	}
	e := n.log()
	e.noteRecord(id, i, -1)
	last := len(e.handles) - 1
	moved := e.handles[last].ID
	if i != last {
		if r, ok := e.records[moved]; ok {
			r.at = i
			e.records = maps.Clone(e.records)
			e.records[moved] = r
		} else {
			// Not edited: only its place changes (an edit that leaves it
			// as it was).
			e.noteRecord(moved, last, i)
		}
	}
	hs := make([]ipam.Handle, last+dropSpare)
	copy(hs, e.handles[:last])
	if i != last {
		hs[i] = e.handles[last]
	}
	e.spare, e.owner = hs, &spareOwner{used: last}
	e.handles = hs[:last:last]
	if i != last {
		e.index.moved(n.Handles, e.handles, idAt{id, -1}, idAt{moved, i})
	} else {
		e.index.moved(n.Handles, e.handles, idAt{id, -1})
	}
	return n.finish(e)
}

// dropSpare is the spare capacity a copy of the records made by a drop
// keeps for records added next; more are appended in a copy twice as
// large.
const dropSpare = 32
