package consistency

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
)

type poolRec struct {
	key  string
	pool ipam.Pool
}

type blockRec struct {
	key   string
	pool  string       // from the key
	cidr  netip.Prefix // from the key
	block ipam.Block
	// unknown blocks could not be decoded or disagree with their key;
	// nothing is checked or repaired against them.
	unknown bool
}

type handleRec struct {
	key     string
	id      string // from the key
	h       ipam.Handle
	unknown bool
}

type affRec struct {
	key  string
	node string
	pool string
	cidr netip.Prefix
}

// snapshot is the whole allocation state, read at once.
type snapshot struct {
	versions map[string]int64
	pools    map[string]*poolRec   // by name
	blocks   map[string]*blockRec  // by key
	handles  map[string]*handleRec // by ID
	affs     map[string]*affRec    // by key
	problems []finding             // found while decoding
	// order lists the keys in the store's (sorted) order.
	order []string
}

// read lists every key of the store in one List: one consistent snapshot
// on every backend (a bbolt read transaction, one etcd range read).
func read(ctx context.Context, s kv.Store) (*snapshot, error) {
	es, err := s.List(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("consistency: read datastore: %w", err)
	}
	snap := &snapshot{
		versions: make(map[string]int64, len(es)),
		pools:    map[string]*poolRec{},
		blocks:   map[string]*blockRec{},
		handles:  map[string]*handleRec{},
		affs:     map[string]*affRec{},
	}
	for _, e := range es {
		snap.versions[e.Key] = e.Version
		snap.order = append(snap.order, e.Key)
		snap.add(e)
	}
	return snap, nil
}

func (s *snapshot) corrupt(key, detail string) {
	s.problems = append(s.problems, finding{Problem: Problem{Kind: KindCorrupt, Key: key, Detail: detail}})
}

func (s *snapshot) mismatch(p Problem) {
	p.Kind = KindKeyMismatch
	s.problems = append(s.problems, finding{Problem: p})
}

func (s *snapshot) add(e kv.KeyValue) {
	switch {
	case strings.HasPrefix(e.Key, allocator.PoolPrefix):
		name := strings.TrimPrefix(e.Key, allocator.PoolPrefix)
		var p ipam.Pool
		if err := json.Unmarshal(e.Value, &p); err != nil {
			s.corrupt(e.Key, "pool value cannot be decoded: "+err.Error())
			return
		}
		if p.Name != name {
			s.mismatch(Problem{Key: e.Key, Pool: name, Detail: fmt.Sprintf("pool stored under %q is named %q", name, p.Name)})
		}
		s.pools[name] = &poolRec{key: e.Key, pool: p}
	case strings.HasPrefix(e.Key, allocator.BlockPrefix):
		pool, cidr, ok := parseBlockKey(e.Key)
		if !ok {
			s.corrupt(e.Key, "block key does not follow blocks/<pool>/<cidr>")
			return
		}
		r := &blockRec{key: e.Key, pool: pool, cidr: cidr}
		s.blocks[e.Key] = r
		if cidr.Addr().BitLen()-cidr.Bits() > ipam.MaxBlockHostBits {
			r.unknown = true
			s.corrupt(e.Key, fmt.Sprintf("block %s is larger than a block can be (/%d at most)", cidr, cidr.Addr().BitLen()-ipam.MaxBlockHostBits))
			return
		}
		if err := json.Unmarshal(e.Value, &r.block); err != nil {
			r.unknown = true
			s.corrupt(e.Key, "block value cannot be decoded: "+err.Error())
			return
		}
		if r.block.CIDR != cidr || r.block.Pool != pool {
			r.unknown = true
			s.mismatch(Problem{Key: e.Key, Pool: pool, Block: cidr.String(),
				Detail: fmt.Sprintf("block stored under pool %q block %s says pool %q block %s", pool, cidr, r.block.Pool, prefixString(r.block.CIDR))})
		}
	case strings.HasPrefix(e.Key, allocator.HandlePrefix):
		id := strings.TrimPrefix(e.Key, allocator.HandlePrefix)
		r := &handleRec{key: e.Key, id: id}
		s.handles[id] = r
		if err := json.Unmarshal(e.Value, &r.h); err != nil {
			r.unknown = true
			s.corrupt(e.Key, "handle value cannot be decoded: "+err.Error())
			return
		}
		if r.h.ID != id {
			r.unknown = true
			s.mismatch(Problem{Key: e.Key, Handle: id, Detail: fmt.Sprintf("handle stored under %q has ID %q", id, r.h.ID)})
		}
	case strings.HasPrefix(e.Key, allocator.AffinityPrefix):
		node, pool, cidr, ok := parseAffinityKey(e.Key)
		if !ok {
			s.corrupt(e.Key, "affinity key does not follow affinity/<node>/<pool>/<cidr>")
			return
		}
		s.affs[e.Key] = &affRec{key: e.Key, node: node, pool: pool, cidr: cidr}
	}
}

// parseBlockKey splits blocks/<pool>/<cidr with - for />.
func parseBlockKey(key string) (string, netip.Prefix, bool) {
	pool, name, ok := strings.Cut(strings.TrimPrefix(key, allocator.BlockPrefix), "/")
	if !ok {
		return "", netip.Prefix{}, false
	}
	cidr, ok := parseBlockName(name)
	return pool, cidr, ok && key == allocator.BlockKey(pool, cidr)
}

// parseAffinityKey splits affinity/<node>/<pool>/<cidr with - for />.
func parseAffinityKey(key string) (node, pool string, cidr netip.Prefix, ok bool) {
	parts := strings.Split(strings.TrimPrefix(key, allocator.AffinityPrefix), "/")
	if len(parts) != 3 {
		return "", "", netip.Prefix{}, false
	}
	cidr, ok = parseBlockName(parts[2])
	return parts[0], parts[1], cidr, ok && key == allocator.AffinityKey(parts[0], parts[1], cidr)
}

func parseBlockName(name string) (netip.Prefix, bool) {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return netip.Prefix{}, false
	}
	p, err := netip.ParsePrefix(name[:i] + "/" + name[i+1:])
	return p, err == nil && p == p.Masked()
}

// blockOf returns the known block record at key, or nil.
func (s *snapshot) blockOf(key string) *blockRec {
	if r := s.blocks[key]; r != nil && !r.unknown {
		return r
	}
	return nil
}

// handleOf returns the known handle with that ID, or nil.
func (s *snapshot) handleOf(id string) *handleRec {
	if r := s.handles[id]; r != nil && !r.unknown {
		return r
	}
	return nil
}

// ordinal returns the ordinal of a in block cidr.
func ordinal(cidr netip.Prefix, a netip.Addr) int {
	b := ipam.Block{CIDR: cidr}
	ord, _ := b.Ordinal(a)
	return ord
}
