package firstlayout

import (
	"slices"
	"strings"
	"sync"

	"github.com/ipkeeper/ipkeeper/internal/kv"
)

// Hint is what an allocator remembers of one node between allocations:
// the node's blocks and the pools it allocated from, each as last read or
// written, with its version (0 when unknown).
//
// A hint is never trusted, only used to skip reads: an allocation whose
// hint holds every version it needs computes its change from the hint and
// commits it guarded by those versions, by the hinted values themselves
// (kv.Cond.Value) and by the handle's absence, so a stale or forged hint
// makes the commit fail, and the allocation then reads the store as if
// there had been no hint. Hinted blocks are validated like stored ones. A
// hint whose blocks are full makes the allocation list the node's affinity
// index before it claims a block; a release takes the handle's blocks from
// its node's hint the same way.
type Hint struct {
	Entries []kv.KeyValue `json:"entries"`
}

// get returns the hinted entry for key.
func (h Hint) get(key string) (kv.KeyValue, bool) {
	i := slices.IndexFunc(h.Entries, func(e kv.KeyValue) bool { return e.Key == key })
	if i < 0 {
		return kv.KeyValue{}, false
	}
	return h.Entries[i], true
}

// complete reports whether the hint holds a known version of every key
// and of every block it lists.
func (h Hint) complete(keys []string) bool {
	for _, k := range keys {
		if e, ok := h.get(k); !ok || e.Version == 0 {
			return false
		}
	}
	return !slices.ContainsFunc(h.Entries, func(e kv.KeyValue) bool { return e.Version == 0 })
}

// blocks returns the hinted block entries.
func (h Hint) blocks() []kv.KeyValue {
	var out []kv.KeyValue
	for _, e := range h.Entries {
		if strings.HasPrefix(e.Key, BlockPrefix) {
			out = append(out, e)
		}
	}
	return out
}

// HintCache keeps Hints per node.
type HintCache interface {
	// Load returns the hint remembered for node.
	Load(node string) (Hint, bool)
	// Store remembers node's hint, replacing the previous one.
	Store(node string, h Hint)
	// Forget drops node's hint.
	Forget(node string)
}

// MemoryHints is a HintCache for one process.
type MemoryHints struct {
	mu    sync.Mutex
	nodes map[string]Hint
}

// Load implements HintCache.
func (c *MemoryHints) Load(node string) (Hint, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.nodes[node]
	return Hint{Entries: slices.Clone(h.Entries)}, ok
}

// Store implements HintCache.
func (c *MemoryHints) Store(node string, h Hint) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodes == nil {
		c.nodes = map[string]Hint{}
	}
	c.nodes[node] = Hint{Entries: slices.Clone(h.Entries)}
}

// Forget implements HintCache.
func (c *MemoryHints) Forget(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.nodes, node)
}
