package allocator

import (
	"sync"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// blockCache keeps decoded blocks by key and version, so that a block this
// process wrote or read is not decoded again while its version is current.
// Blocks are immutable values here (every ipam operation returns a copy),
// so a cached block is shared safely.
type blockCache struct {
	mu      sync.Mutex
	entries map[string]cachedBlock
}

type cachedBlock struct {
	version int64
	block   ipam.Block
}

// maxCachedBlocks bounds the cache; past it the cache starts over, which
// costs only decoding.
const maxCachedBlocks = 4096

func (c *blockCache) get(key string, version int64) (ipam.Block, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || e.version != version || version == 0 {
		return ipam.Block{}, false
	}
	return e.block, true
}

func (c *blockCache) put(key string, version int64, b ipam.Block) {
	if version == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil || len(c.entries) >= maxCachedBlocks {
		c.entries = make(map[string]cachedBlock)
	}
	c.entries[key] = cachedBlock{version: version, block: b}
}
