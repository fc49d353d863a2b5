package firstlayout

import (
	"bytes"
	"sync"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// blockCache keeps decoded (and validated) blocks by key, version and
// encoded value, so that a block this process wrote or read is not
// decoded again while it is current. A hit needs the same bytes, not only
// the same version: a value claiming a cached version (a forged or
// corrupt hint) is decoded and validated on its own. Blocks are immutable
// values here (every ipam operation returns a copy), so a cached block is
// shared safely.
type blockCache struct {
	mu      sync.Mutex
	entries map[string]cachedBlock
}

type cachedBlock struct {
	version int64
	raw     []byte
	block   ipam.Block
}

// maxCachedBlocks bounds the cache; past it the cache starts over, which
// costs only decoding.
const maxCachedBlocks = 4096

func (c *blockCache) get(key string, version int64, raw []byte) (ipam.Block, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || e.version != version || version == 0 || !bytes.Equal(e.raw, raw) {
		return ipam.Block{}, false
	}
	return e.block, true
}

// put caches b, decoded from (or encoded as) raw at version. raw must not
// change afterwards.
func (c *blockCache) put(key string, version int64, raw []byte, b ipam.Block) {
	if version == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil || len(c.entries) >= maxCachedBlocks {
		c.entries = make(map[string]cachedBlock)
	}
	c.entries[key] = cachedBlock{version: version, raw: raw, block: b}
}
