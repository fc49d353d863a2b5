package allocator

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
)

// AffineNodes returns every node that holds block affinity records, with
// how many it holds.
func (a *Allocator) AffineNodes(ctx context.Context) (map[string]int, error) {
	es, err := a.store.List(ctx, AffinityPrefix)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, e := range es {
		node, _, ok := strings.Cut(strings.TrimPrefix(e.Key, AffinityPrefix), "/")
		if ok && node != "" {
			out[node]++
		}
	}
	return out, nil
}

// NodeBlock is one block of a node's affinity records.
type NodeBlock struct {
	Pool  string
	Block netip.Prefix
}

// NodeCleanup is what FreeNodeBlocks did for a node.
type NodeCleanup struct {
	// Freed are the empty blocks deleted with their affinity records.
	Freed []NodeBlock
	// Dropped are affinity records deleted whose block was missing or
	// affine to another node (the block itself was left alone).
	Dropped []NodeBlock
	// Kept are the node's blocks that still hold addresses: they stay,
	// with their affinity, until those are released.
	Kept []NodeBlock
}

// FreeNodeBlocks frees the blocks of a node that is gone: each empty block
// affine to it is deleted together with its affinity record, and each
// affinity record of it whose block is missing or affine to another node
// is deleted. Each block is its own transaction, guarded by the versions
// of the block and of the record as read (a block the node or anyone else
// allocated from meanwhile is not deleted; the conflict is retried from a
// fresh read). Blocks that hold addresses are kept with their affinity
// record: the pods' allocations are released by their own rules, and a
// later call frees the blocks once empty.
//
// Only call it for a node that is gone: an allocation on the node that
// commits after its block was freed claims a new block, which is
// consistent, but churn.
func (a *Allocator) FreeNodeBlocks(ctx context.Context, node string) (NodeCleanup, error) {
	var out NodeCleanup
	if node == "" || strings.Contains(node, "/") {
		return out, fmt.Errorf("free node blocks: bad node name %q", node)
	}
	es, err := a.store.List(ctx, AffinityPrefix+node+"/")
	if err != nil {
		return out, err
	}
	for _, e := range es {
		pool, cidr, ok := parseAffinityKey(node, e.Key)
		if !ok {
			a.log.Warn("unreadable affinity record left alone", "key", e.Key)
			continue
		}
		nb := NodeBlock{Pool: pool, Block: cidr}
		var did string
		err := a.retry(ctx, "free block "+cidr.String()+" of node "+node, func() error {
			var err error
			did, err = a.freeNodeBlock(ctx, node, e.Key, nb)
			return err
		})
		if errors.Is(err, ErrCorrupt) {
			a.log.Warn("unreadable block of a gone node left alone", "node", node, "block", nb.Block, "pool", nb.Pool, "err", err)
			continue
		}
		if err != nil {
			return out, err
		}
		switch did {
		case "freed":
			out.Freed = append(out.Freed, nb)
		case "dropped":
			out.Dropped = append(out.Dropped, nb)
		case "kept":
			out.Kept = append(out.Kept, nb)
		}
	}
	return out, nil
}

// freeNodeBlock handles one affinity record of a gone node; it says what
// it did ("" when the record was gone already).
func (a *Allocator) freeNodeBlock(ctx context.Context, node, affKey string, nb NodeBlock) (string, error) {
	blockKey := BlockKey(nb.Pool, nb.Block)
	es, err := a.store.Get(ctx, affKey, blockKey)
	if err != nil {
		return "", err
	}
	aff, be := es[0], es[1]
	if aff.Version == 0 {
		return "", nil
	}
	conds := []kv.Cond{{Key: aff.Key, Version: aff.Version}, {Key: be.Key, Version: be.Version}}
	ops := []kv.Op{{Key: aff.Key, Delete: true}}
	did := "dropped"
	if be.Version != 0 {
		// Only the owners matter here: a block that fails validation is
		// still deleted when it holds nothing and is this node's.
		b, err := decode[ipam.Block](be)
		if err != nil {
			return "", err
		}
		if b.Node == node && b.Pool == nb.Pool && b.CIDR == nb.Block {
			if b.InUse() > 0 {
				return "kept", nil
			}
			ops = append(ops, kv.Op{Key: be.Key, Delete: true})
			did = "freed"
		}
	}
	if err := a.store.Txn(ctx, conds, ops); err != nil {
		return "", err
	}
	a.hints.Forget(node)
	return did, nil
}
