package migrate

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/nodealloc"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
)

// convert computes the typed keys and values equivalent to the
// first-layout keys among es: it decodes the first layout's blocks and
// handles and lets nodealloc.Assemble make the node objects, their loans
// and claims (blocks are the truth about ownership, as they were for the
// first layout's allocator; see Assemble for orphans, strays and blocks of
// no node). Affinity keys only index the blocks' Node and are not read.
func convert(es []kv.KeyValue, rep *Report) (map[string][]byte, error) {
	var handles []ipam.Handle
	var blocks []ipam.Block
	for _, e := range es {
		switch {
		case strings.HasPrefix(e.Key, firstBlockPrefix):
			b, err := decodeFirst[ipam.Block](e)
			if err != nil {
				return nil, err
			}
			if err := b.Validate(); err != nil {
				return nil, fmt.Errorf("%w: migrate: %s: %v", store.ErrCorrupt, e.Key, err)
			}
			if e.Key != firstBlockPrefix+b.Pool+"/"+strings.Replace(b.CIDR.String(), "/", "-", 1) {
				return nil, fmt.Errorf("%w: migrate: %s holds block %s of pool %q", store.ErrCorrupt, e.Key, b.CIDR, b.Pool)
			}
			blocks = append(blocks, b)
		case strings.HasPrefix(e.Key, firstHandlePrefix):
			h, err := decodeFirst[ipam.Handle](e)
			if err != nil {
				return nil, err
			}
			if e.Key != firstHandlePrefix+h.ID {
				return nil, fmt.Errorf("%w: migrate: %s holds handle %q", store.ErrCorrupt, e.Key, h.ID)
			}
			handles = append(handles, h)
		}
	}
	blocks, handles, renamed := nodealloc.CanonicalIDs(blocks, handles)
	for _, old := range slices.Sorted(maps.Keys(renamed)) {
		rep.Renamed = append(rep.Renamed, old+" -> "+renamed[old])
	}
	asm, err := nodealloc.Assemble(blocks, handles)
	if err != nil {
		return nil, fmt.Errorf("%w: migrate: the first layout's blocks and handles do not make node objects: %w", store.ErrCorrupt, err)
	}
	for _, r := range asm.Dropped {
		rep.DroppedBlocks = append(rep.DroppedBlocks, r.String())
	}
	for _, r := range asm.Unaffine {
		rep.UnaffineBlocks = append(rep.UnaffineBlocks, r.String())
	}
	for _, f := range asm.Orphans {
		rep.Orphans = append(rep.Orphans, f.String())
	}
	for _, f := range asm.Strays {
		rep.Strays = append(rep.Strays, f.String())
	}
	target, err := kvbacked.ObjectKeys(asm.Nodes, asm.Claims)
	if err != nil {
		return nil, fmt.Errorf("%w: migrate: %w", store.ErrCorrupt, err)
	}
	rep.Nodes, rep.Claims = len(asm.Nodes), len(asm.Claims)
	for _, n := range asm.Nodes {
		rep.Handles += len(n.Handles)
	}
	return target, nil
}
