package firstlayout

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
)

// The datastore layout: the prefixes of pool, block, affinity and handle
// keys. Every key is relative to the backend's prefix.
const (
	PoolPrefix     = "pools/"
	BlockPrefix    = "blocks/"
	AffinityPrefix = "affinity/"
	HandlePrefix   = "handles/"
)

// PoolKey is the key of a pool definition.
func PoolKey(name string) string { return PoolPrefix + name }

// BlockKey is the key of block cidr of pool.
func BlockKey(pool string, cidr netip.Prefix) string {
	return BlockPrefix + pool + "/" + blockName(cidr)
}

// AffinityKey is the key recording that node claimed block cidr of pool.
func AffinityKey(node, pool string, cidr netip.Prefix) string {
	return AffinityPrefix + node + "/" + pool + "/" + blockName(cidr)
}

// HandleKey is the key of a handle.
func HandleKey(id string) string { return HandlePrefix + id }

func blockName(cidr netip.Prefix) string {
	return strings.Replace(cidr.String(), "/", "-", 1)
}

// parseAffinityKey splits an affinity key into pool and block prefix.
func parseAffinityKey(node, key string) (pool string, cidr netip.Prefix, ok bool) {
	rest, found := strings.CutPrefix(key, AffinityPrefix+node+"/")
	if !found {
		return "", netip.Prefix{}, false
	}
	pool, name, found := strings.Cut(rest, "/")
	if !found {
		return "", netip.Prefix{}, false
	}
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return "", netip.Prefix{}, false
	}
	cidr, err := netip.ParsePrefix(name[:i] + "/" + name[i+1:])
	return pool, cidr, err == nil
}

// Encode is how every datastore value is written: JSON of plain data.
func Encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Only plain data types are encoded here; failure is a programming error.
		panic(fmt.Sprintf("allocator: encode %T: %v", v, err))
	}
	return b
}

// decodeBlock decodes a block entry and refuses a block that fails
// ipam.Block.Validate or disagrees with its key: allocating from or
// releasing into it could hand out an address twice or one outside the
// block.
func decodeBlock(e kv.KeyValue) (ipam.Block, error) {
	b, err := decode[ipam.Block](e)
	if err != nil {
		return b, err
	}
	if err := b.Validate(); err != nil {
		return ipam.Block{}, fmt.Errorf("%w: %s: %w ('ipkeeperctl check --repair' repairs it)", allocator.ErrCorrupt, e.Key, err)
	}
	if e.Key != BlockKey(b.Pool, b.CIDR) {
		return ipam.Block{}, fmt.Errorf("%w: %s holds block %s of pool %q ('ipkeeperctl check' reports it)", allocator.ErrCorrupt, e.Key, b.CIDR, b.Pool)
	}
	return b, nil
}

func decode[T any](e kv.KeyValue) (T, error) {
	var v T
	if err := json.Unmarshal(e.Value, &v); err != nil {
		return v, fmt.Errorf("%w: %s: %v", allocator.ErrCorrupt, e.Key, err)
	}
	return v, nil
}
