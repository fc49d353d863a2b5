package webui

import (
	"iter"
	"sort"
	"strings"
)

// handleIndex finds the handles whose names contain a string without
// touching every handle: the "namespace/pod", container ID and handle ID
// of every handle (ASCII letters folded to lower case), one entry after
// another in one string that strings.Index scans. Handles put after it was
// built are kept aside in model.idxAdded and looked at one by one; handles
// deleted or replaced since are skipped (their entry names a handleState
// the model no longer holds). It is built in the background after the
// first full read of the datastore, and again when the handles put since
// outnumber an eighth of it.
type handleIndex struct {
	hay    string
	starts []int32 // where each entry begins in hay, ascending
	hs     []*handleState
}

// rebuildAfter is how many handles may be put after the index was built
// before it is built again, beyond an eighth of its size.
const rebuildAfter = 1024

// handleIndex returns the search index and the handles put since it was
// built, building it when there is none. When those handles are many, a
// new index is built in the background (the answers stay right: they are
// looked at aside until it is ready). m.mu must be held for reading.
func (m *model) handleIndex() (*handleIndex, []*handleState) {
	m.idxMu.Lock()
	defer m.idxMu.Unlock()
	if m.idx == nil {
		m.idx, m.idxAdded = m.buildIndex(), nil
	} else if len(m.idxAdded) > rebuildAfter+len(m.idx.hs)/8 {
		m.rebuildLocked()
	}
	return m.idx, m.idxAdded
}

// rebuildLocked starts building the index in the background unless that
// is under way. m.idxMu must be held, and m.mu (for reading or writing).
func (m *model) rebuildLocked() {
	if m.idxBuilding {
		return
	}
	m.idxBuilding, m.idxPending = true, nil
	go func() {
		// The handles are taken with mu held; the index is built
		// without it (changes go on meanwhile: the handles put from then
		// on are kept in idxPending, to be looked at aside).
		m.mu.RLock()
		hs := m.handleList()
		m.idxMu.Lock()
		m.idxPending = nil
		m.idxMu.Unlock()
		m.mu.RUnlock()
		if indexTaken != nil {
			indexTaken()
		}
		x := indexHandles(hs)
		m.mu.RLock()
		m.idxMu.Lock()
		m.idx, m.idxAdded, m.idxPending, m.idxBuilding = x, m.idxPending, nil, false
		m.idxMu.Unlock()
		m.mu.RUnlock()
	}()
}

// indexTaken, when set (by tests), runs after a background build of the
// index took the handles, before it builds.
var indexTaken func()

// handleList returns every handle. m.mu must be held.
func (m *model) handleList() []*handleState {
	hs := make([]*handleState, 0, len(m.handles))
	for _, h := range m.handles {
		hs = append(hs, h)
	}
	return hs
}

// buildIndex indexes every handle. m.mu must be held for reading.
func (m *model) buildIndex() *handleIndex { return indexHandles(m.handleList()) }

// indexHandles indexes handles hs (their IDs and records, which do not change
// but atomically for an equal one: it needs no lock).
func indexHandles(hs []*handleState) *handleIndex {
	x := &handleIndex{starts: make([]int32, 0, len(hs)), hs: hs}
	size := 0
	for _, h := range hs {
		r := h.rec()
		size += len(r.Namespace) + len(r.Pod) + len(r.ContainerID) + len(h.id) + 4
	}
	var b strings.Builder
	b.Grow(size)
	for _, h := range hs {
		x.starts = append(x.starts, int32(b.Len()))
		r := h.rec()
		b.WriteString(r.Namespace)
		b.WriteByte('/')
		b.WriteString(r.Pod)
		b.WriteByte('\n')
		b.WriteString(r.ContainerID)
		b.WriteByte('\n')
		b.WriteString(h.id)
		b.WriteByte(0)
	}
	// Kubernetes names are lower case: this is mostly one scan. (Only
	// ASCII letters are folded, so every entry keeps its offset.)
	x.hay = asciiLower(b.String())
	return x
}

// searchHandles yields, once each, every current handle whose
// "namespace/pod", container ID or handle ID may contain lq (lower case);
// callers check the fields themselves (an entry can also match across its
// separators). m.mu must be held for reading.
func (m *model) searchHandles(lq string) iter.Seq[*handleState] {
	return func(yield func(*handleState) bool) {
		x, added := m.handleIndex()
		current := func(h *handleState) bool { return m.handles[h.id] == h }
		if hasUpper(lq) || strings.ContainsRune(lq, 0) {
			// Non-ASCII letters are not folded in the index: look at
			// every handle.
			for _, h := range m.handles {
				if !yield(h) {
					return
				}
			}
			return
		}
		for pos := 0; pos < len(x.hay); {
			i := strings.Index(x.hay[pos:], lq)
			if i < 0 {
				break
			}
			// The entry holding the match; the scan goes on after it.
			e := sort.Search(len(x.starts), func(k int) bool { return int(x.starts[k]) > pos+i }) - 1
			if h := x.hs[e]; current(h) && !yield(h) {
				return
			}
			if e+1 >= len(x.starts) {
				break
			}
			pos = int(x.starts[e+1])
		}
		for _, h := range added {
			if current(h) && !yield(h) {
				return
			}
		}
	}
}

// asciiLower folds ASCII upper case letters only, so lengths stay.
func asciiLower(s string) string {
	if !hasUpperASCII(s) {
		return s
	}
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func hasUpperASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			return true
		}
	}
	return false
}
