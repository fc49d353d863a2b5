package store

import (
	"sync"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// idIndex finds a node object's records by ID. It holds for one list of
// records, of: the edits that turn that list into another carry it
// along (an edit costs an entry, not a rebuild), and copies of the object
// share it, so that a process keeping a node object and changing it by
// edits finds a record without looking through the others. A lookup in
// another list (an earlier copy, a list changed otherwise) builds it
// again for that list.
type idIndex struct {
	mu sync.Mutex
	of []ipam.Handle
	at map[string]int
}

// minIndexed is the fewest records an index is built for: a shorter list
// is looked through.
const minIndexed = 64

// find returns the index of the record of id in hs, -1 when hs holds
// none.
func (x *idIndex) find(hs []ipam.Handle, id string) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.at == nil || !sameList(x.of, hs) {
		x.of, x.at = hs, make(map[string]int, len(hs))
		for i := range hs {
			x.at[hs[i].ID] = i
		}
	}
	if i, ok := x.at[id]; ok {
		return i
	}
	return -1
}

// idAt is a record's new index in a list (-1: no longer in it).
type idAt struct {
	id string
	at int
}

// moved notes that an edit turned list from into to, moving the records
// named; the index follows when it held for from.
func (x *idIndex) moved(from, to []ipam.Handle, ids ...idAt) {
	if x == nil {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.at == nil || !sameList(x.of, from) {
		return
	}
	for _, m := range ids {
		if m.at < 0 {
			delete(x.at, m.id)
		} else {
			x.at[m.id] = m.at
		}
	}
	x.of = to
}
