package ctl

import (
	"context"
	"errors"
	"fmt"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// claimedBlock is a claimed block as the verbs read it: its claim, and
// the object of the node the claim names, which alone may hold the
// block's state (docs/STORAGE.md).
type claimedBlock struct {
	Claim store.Claim
	// Object is the claim's node object (empty when it does not exist).
	Object store.Node
	// Block is the block as Object holds it; Held is false when Object
	// does not hold it yet (an ADD stopped between its claim and its node
	// write): then the block is free as a whole, as the node's next ADD
	// adopts it empty.
	Block ipam.Block
	Held  bool
}

// record returns the record of the handle holding ord, with the handle's
// node as the CLI shows it.
func (b claimedBlock) record(ord int) (string, *ipam.Handle) {
	id, ok := b.Block.Owners[ord]
	if !ok {
		return "", nil
	}
	r, found := b.Object.Handle(id)
	if !found {
		return id, nil
	}
	r = shownHandle(r)
	return id, &r
}

// readClaimed reads the claims sel names and, once each, the node objects
// they name.
func readClaimed(ctx context.Context, s store.Store, sel store.ClaimSelector) ([]claimedBlock, error) {
	claims, err := s.ListClaims(ctx, sel)
	if err != nil {
		return nil, storeError(err)
	}
	objects := map[string]store.Node{}
	out := make([]claimedBlock, 0, len(claims))
	for _, c := range claims {
		n, ok := objects[c.Node]
		if !ok {
			if n, err = getNode(ctx, s, c.Node); err != nil {
				return nil, err
			}
			objects[c.Node] = n
		}
		out = append(out, claimedIn(c, n))
	}
	return out, nil
}

// readClaim reads the claim of ref and its node object; found is false
// when the block is not claimed.
func readClaim(ctx context.Context, s store.Store, ref store.BlockRef) (claimedBlock, bool, error) {
	c, err := s.GetClaim(ctx, ref)
	if errors.Is(err, store.ErrNotFound) {
		return claimedBlock{}, false, nil
	}
	if err != nil {
		return claimedBlock{}, false, storeError(err)
	}
	n, err := getNode(ctx, s, c.Node)
	if err != nil {
		return claimedBlock{}, false, err
	}
	return claimedIn(c, n), true, nil
}

func claimedIn(c store.Claim, n store.Node) claimedBlock {
	b, held := n.Block(c.BlockRef)
	if !held {
		b = ipam.Block{CIDR: c.CIDR, Pool: c.Pool, Node: c.Node}
	}
	return claimedBlock{Claim: c, Object: n, Block: b, Held: held}
}

// getNode reads a node object; an absent one is empty.
func getNode(ctx context.Context, s store.Store, name string) (store.Node, error) {
	n, err := s.GetNode(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return store.Node{Name: name}, nil
	}
	if err != nil {
		return store.Node{}, storeError(err)
	}
	return n, nil
}

// storeError names an object that cannot be decoded as corrupt and says
// which verb reports it.
func storeError(err error) error {
	if errors.Is(err, store.ErrCorrupt) && !errors.Is(err, allocator.ErrCorrupt) {
		return fmt.Errorf("%w: %w ('ipkeeperctl check' reports it)", allocator.ErrCorrupt, err)
	}
	return err
}

// shownNode is a node name as the CLI shows it: blocks and handles
// imported without a node (whereabouts) are held in store.UnaffineNode's
// object, which is no node.
func shownNode(node string) string {
	if node == store.UnaffineNode {
		return ""
	}
	return node
}

// shownHandle is h with its node as the CLI shows it.
func shownHandle(h ipam.Handle) ipam.Handle {
	h.Node = shownNode(h.Node)
	return h
}

// freeCount is the number of addresses the pool can still hand out from
// the block: all it permits when the claim's node does not hold it yet.
func (b claimedBlock) freeCount(p ipam.Pool) int {
	if !b.Held {
		return p.PermittedIn(b.Block.CIDR)
	}
	return b.Block.FreeCount(p)
}

// shownHandles returns every handle, with nodes as the CLI shows them.
func shownHandles(ctx context.Context, a *allocator.Allocator) ([]ipam.Handle, error) {
	hs, err := a.Handles(ctx)
	if err != nil {
		return nil, err
	}
	for i := range hs {
		hs[i] = shownHandle(hs[i])
	}
	return hs, nil
}
