// Package invariant checks that an ipkeeper datastore is consistent: the
// state every allocation and release transaction must leave behind, under
// any concurrency or crash. It reads the whole store at one snapshot
// (kv.Store.List of everything) and only uses the allocator's key layout,
// so it works on every backend; the admin CLI's check can call Check.
package invariant

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
)

// Report is what Check found.
type Report struct {
	// Pools, Blocks, Affinities and Handles count the stored objects.
	Pools, Blocks, Affinities, Handles int
	// Allocated counts addresses blocks give to handles.
	Allocated int
	// Problems lists every violated invariant, one line each, sorted.
	Problems []string
}

// OK reports whether no invariant is violated.
func (r Report) OK() bool { return len(r.Problems) == 0 }

// Error returns the problems as an error, or nil when there are none.
func (r Report) Error() error {
	if r.OK() {
		return nil
	}
	const show = 20
	p := r.Problems
	more := ""
	if len(p) > show {
		more = fmt.Sprintf("\n... and %d more", len(p)-show)
		p = p[:show]
	}
	return fmt.Errorf("datastore inconsistent: %d problems:\n%s%s", len(r.Problems), strings.Join(p, "\n"), more)
}

// Check verifies, at one snapshot of s:
//   - every value decodes, and every block is internally sound (each
//     ordinal exactly once, free or allocated);
//   - every block belongs to an existing pool and lies inside it;
//   - every address a block allocates belongs to a handle that exists and
//     lists it (no address without a handle);
//   - every address a handle lists is allocated to it by its block (no
//     handle without its address), and no address is listed twice;
//   - every block with a node has that node's affinity entry, and every
//     affinity entry names an existing block of that node.
func Check(ctx context.Context, s kv.Store) (Report, error) {
	all, err := s.List(ctx, "")
	if err != nil {
		return Report{}, err
	}
	var r Report
	bad := func(format string, args ...any) { r.Problems = append(r.Problems, fmt.Sprintf(format, args...)) }
	pools := map[string]ipam.Pool{}
	blocks := map[string]ipam.Block{} // by pool + "/" + cidr
	handles := map[string]ipam.Handle{}
	affinity := map[string]string{} // affinity key -> value
	for _, e := range all {
		switch {
		case strings.HasPrefix(e.Key, "pools/"):
			var p ipam.Pool
			if err := json.Unmarshal(e.Value, &p); err != nil {
				bad("%s: undecodable pool: %v", e.Key, err)
				continue
			}
			pools[p.Name] = p
		case strings.HasPrefix(e.Key, "blocks/"):
			var b ipam.Block
			if err := json.Unmarshal(e.Value, &b); err != nil {
				bad("%s: undecodable block: %v", e.Key, err)
				continue
			}
			if want := allocator.BlockKey(b.Pool, b.CIDR); want != e.Key {
				bad("%s holds block %s of pool %q (key should be %s)", e.Key, b.CIDR, b.Pool, want)
			}
			blocks[b.Pool+"/"+b.CIDR.String()] = b
		case strings.HasPrefix(e.Key, "handles/"):
			var h ipam.Handle
			if err := json.Unmarshal(e.Value, &h); err != nil {
				bad("%s: undecodable handle: %v", e.Key, err)
				continue
			}
			if allocator.HandleKey(h.ID) != e.Key {
				bad("%s holds handle %q", e.Key, h.ID)
			}
			handles[h.ID] = h
		case strings.HasPrefix(e.Key, "affinity/"):
			affinity[e.Key] = string(e.Value)
		}
	}
	r.Pools, r.Blocks, r.Handles, r.Affinities = len(pools), len(blocks), len(handles), len(affinity)

	for _, b := range blocks {
		for _, p := range b.Check() {
			bad("block %s: %s", b.CIDR, p)
		}
		p, ok := pools[b.Pool]
		switch {
		case !ok:
			bad("block %s names pool %q, which does not exist", b.CIDR, b.Pool)
		case !p.CIDR.Contains(b.CIDR.Addr()) || b.CIDR.Bits() != p.BlockSize:
			bad("block %s does not fit pool %q (%s, /%d blocks)", b.CIDR, b.Pool, p.CIDR, p.BlockSize)
		}
		for _, a := range b.Allocations() {
			r.Allocated++
			h, ok := handles[a.Handle]
			if !ok {
				bad("address %s (block %s) is held by handle %q, which does not exist", a.Addr, b.CIDR, a.Handle)
				continue
			}
			if !slices.ContainsFunc(h.IPs, func(ip ipam.HandleIP) bool { return ip.Addr == a.Addr }) {
				bad("address %s (block %s) is held by handle %q, which does not list it", a.Addr, b.CIDR, a.Handle)
			}
		}
		if b.Node != "" {
			key := allocator.AffinityKey(b.Node, b.Pool, b.CIDR)
			if _, ok := affinity[key]; !ok {
				bad("block %s of pool %q is affine to node %q without its affinity entry", b.CIDR, b.Pool, b.Node)
			}
		}
	}
	seen := map[netip.Addr]string{}
	for _, h := range handles {
		if len(h.IPs) == 0 {
			bad("handle %q holds no address", h.ID)
		}
		for _, ip := range h.IPs {
			if other, dup := seen[ip.Addr]; dup {
				bad("address %s is listed by handles %q and %q", ip.Addr, other, h.ID)
			}
			seen[ip.Addr] = h.ID
			b, ok := blocks[ip.Pool+"/"+ip.Block.String()]
			if !ok {
				bad("handle %q lists %s in block %s of pool %q, which does not exist", h.ID, ip.Addr, ip.Block, ip.Pool)
				continue
			}
			if owner := b.Owner(ip.Addr); owner != h.ID {
				bad("handle %q lists %s, which its block gives to %q", h.ID, ip.Addr, owner)
			}
		}
	}
	byKey := make(map[string]ipam.Block, len(blocks))
	for _, b := range blocks {
		byKey[allocator.BlockKey(b.Pool, b.CIDR)] = b
	}
	for key, val := range affinity {
		b, ok := byKey[val]
		if !ok {
			bad("affinity entry %s names block %s, which does not exist", key, val)
			continue
		}
		if !strings.HasPrefix(key, "affinity/"+b.Node+"/") {
			bad("affinity entry %s names block %s, which is affine to node %q", key, b.CIDR, b.Node)
		}
	}
	slices.Sort(r.Problems)
	return r, nil
}
