package allocator

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// AffinityCache remembers which blocks a node holds, so that an allocation
// reads them in the same request as the handle and its pools instead of
// listing the affinity index first. Its entries are hints only: every block
// read on a hint is checked to be the node's, a stale hint falls back to
// listing the index, and the index is listed before any new block is
// claimed. A wrong hint costs a round trip, never correctness.
type AffinityCache interface {
	// Load returns the block keys remembered for node.
	Load(node string) ([]string, bool)
	// Store remembers the block keys of node, replacing what was known.
	Store(node string, blockKeys []string)
	// Forget drops what is remembered for node.
	Forget(node string)
}

// MemoryAffinityCache is an AffinityCache for one process.
type MemoryAffinityCache struct {
	mu    sync.Mutex
	nodes map[string][]string
}

// Load implements AffinityCache.
func (c *MemoryAffinityCache) Load(node string) ([]string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys, ok := c.nodes[node]
	return slices.Clone(keys), ok
}

// Store implements AffinityCache.
func (c *MemoryAffinityCache) Store(node string, blockKeys []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodes == nil {
		c.nodes = map[string][]string{}
	}
	c.nodes[node] = slices.Clone(blockKeys)
}

// Forget implements AffinityCache.
func (c *MemoryAffinityCache) Forget(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.nodes, node)
}

// FileAffinityCache keeps the hints in one small file per node under Dir,
// for plugin processes that live for one call. Writes are atomic renames
// without fsync: a lost or torn hint is only a hint.
type FileAffinityCache struct {
	// Dir holds the files; it is created when missing.
	Dir string
}

func (c FileAffinityCache) path(node string) string {
	return filepath.Join(c.Dir, "affinity-"+strings.ReplaceAll(node, string(filepath.Separator), "_")+".json")
}

// Load implements AffinityCache.
func (c FileAffinityCache) Load(node string) ([]string, bool) {
	b, err := os.ReadFile(c.path(node))
	if err != nil {
		return nil, false
	}
	var keys []string
	if json.Unmarshal(b, &keys) != nil {
		return nil, false
	}
	return keys, true
}

// Store implements AffinityCache.
func (c FileAffinityCache) Store(node string, blockKeys []string) {
	if old, ok := c.Load(node); ok && slices.Equal(old, blockKeys) {
		return
	}
	b, _ := json.Marshal(blockKeys)
	if os.MkdirAll(c.Dir, 0o700) != nil {
		return
	}
	tmp, err := os.CreateTemp(c.Dir, ".affinity-*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if werr != nil || cerr != nil || os.Rename(tmp.Name(), c.path(node)) != nil {
		_ = os.Remove(tmp.Name())
	}
}

// Forget implements AffinityCache.
func (c FileAffinityCache) Forget(node string) { _ = os.Remove(c.path(node)) }
