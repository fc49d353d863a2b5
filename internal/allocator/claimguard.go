package allocator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// The claim guard.
//
// A node object is written with its node's credentials, a claim names the
// one node that may keep its block's state (store.Claim), and claims are
// immutable: a claim names one node for its lifetime. An address is
// handed out only from a block whose claim names the object it is taken
// from: a block that a node's object holds although the cluster's claims
// give it to another node (or to none) fails the allocation with
// ErrBlockNotClaimed naming the block, and nothing is written. So an
// object rewritten with another node's block in it — by a stolen node
// token, or root on that node — does not make any allocator hand out the
// other node's addresses.
//
// The check adds no read to a warm allocation: the allocator remembers,
// per node, the blocks it knows the node claims (claims it created or
// read naming the node, a list of the node's claims, or what the opener
// was told: a plugin's hint, whose claims its first write requires) and
// the node object's version they hold for. A block of a claim is deleted
// only after it left its node's object (pool removal, a gone node's
// cleanup), which writes the object: so while the object is at that
// version, or moved on only by this allocator's own writes, what it knows
// is still true. Any other version (another writer changed the object)
// is checked again: one list of the node's claims. A lender's block is
// checked with a read of its claim (borrowing is rare).

// claimMemo is what the allocator knows of one node's claims: each block
// of blocks is claimed by the node, as long as the node's object stays at
// version at (or moves on by this allocator's writes).
type claimMemo struct {
	at     store.Version
	blocks map[store.BlockRef]bool
}

// claimsKnown holds a claimMemo per node.
type claimsKnown struct {
	mu    sync.Mutex
	nodes map[string]claimMemo
}

// knownAt returns the blocks known claimed by node while its object is at
// version at (nil when nothing is known for that version).
func (k *claimsKnown) knownAt(node string, at store.Version) map[store.BlockRef]bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	m, ok := k.nodes[node]
	if !ok || m.at != at {
		return nil
	}
	return m.blocks
}

// learn records that node claims blocks while its object is at version at
// (the blocks known for that version before are kept).
func (k *claimsKnown) learn(node string, at store.Version, blocks map[store.BlockRef]bool) {
	if len(blocks) == 0 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.nodes == nil {
		k.nodes = map[string]claimMemo{}
	}
	m, ok := k.nodes[node]
	next := claimMemo{at: at, blocks: maps.Clone(blocks)}
	if ok && m.at == at {
		maps.Copy(next.blocks, m.blocks)
	}
	k.nodes[node] = next
}

// advance moves what is known of node's claims from version from to
// version to: the allocator wrote the object at from and it is now at to.
func (k *claimsKnown) advance(node string, from, to store.Version) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if m, ok := k.nodes[node]; ok && m.at == from {
		m.at = to
		k.nodes[node] = m
	}
}

// drop forgets that node claims block ref (its claim was deleted).
func (k *claimsKnown) drop(node string, ref store.BlockRef) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if m, ok := k.nodes[node]; ok && m.blocks[ref] {
		m.blocks = maps.Clone(m.blocks)
		delete(m.blocks, ref)
		k.nodes[node] = m
	}
}

// clear forgets everything.
func (k *claimsKnown) clear() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.nodes = nil
}

// ownBlocks returns the blocks of n that h's record in n has addresses in.
func ownBlocks(n store.Node, id string) []store.BlockRef {
	r, ok := n.Handle(id)
	if !ok {
		return nil
	}
	var out []store.BlockRef
	for _, ip := range r.IPs {
		ref := store.BlockRef{Pool: ip.Pool, CIDR: ip.Block}
		if _, held := n.Block(ref); held {
			out = append(out, ref)
		}
	}
	return out
}

// unverified returns the refs that neither confirmed nor what is known of
// own's claims at own's version covers.
func (a *Allocator) unverified(own store.Node, refs []store.BlockRef, confirmed map[store.BlockRef]bool) []store.BlockRef {
	known := a.claims.knownAt(own.Name, own.Version)
	var out []store.BlockRef
	for _, ref := range refs {
		if !confirmed[ref] && !known[ref] {
			out = append(out, ref)
		}
	}
	return out
}

// verifyOwn checks that own's node claims every block of refs (blocks of
// own that an allocation hands out addresses of) before own, at its
// version, is written. confirmed are blocks this allocation claimed or
// read the claim of. Blocks not known are checked by one list of the
// node's claims, read after own was: while own stays at its version no
// claim of its blocks can have been deleted (the deletion writes the
// object first), so the list holds for the write's compare-and-swap.
func (a *Allocator) verifyOwn(ctx context.Context, own store.Node, refs []store.BlockRef, confirmed map[store.BlockRef]bool) error {
	a.claims.learn(own.Name, own.Version, confirmed)
	need := a.unverified(own, refs, confirmed)
	if len(need) == 0 {
		return nil
	}
	claims, err := a.store.ListClaims(ctx, store.ClaimSelector{Node: own.Name})
	if err != nil {
		return storeErr(err)
	}
	listed := maps.Clone(confirmed)
	if listed == nil {
		listed = map[store.BlockRef]bool{}
	}
	for _, c := range claims {
		if c.Node == own.Name {
			listed[c.BlockRef] = true
		}
	}
	a.claims.learn(own.Name, own.Version, listed)
	for _, ref := range need {
		if !listed[ref] {
			return a.notClaimed(ctx, own.Name, ref)
		}
	}
	return nil
}

// verifyLent checks that lender claims block ref, from which an address
// of lender's object is about to be handed out (borrowed).
func (a *Allocator) verifyLent(ctx context.Context, lender string, ref store.BlockRef) error {
	c, err := a.store.GetClaim(ctx, ref)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return notClaimedErr(lender, ref, "")
	case err != nil:
		return storeErr(err)
	case c.Node != lender:
		return notClaimedErr(lender, ref, c.Node)
	}
	return nil
}

// notClaimed is the error for block ref of node's object, which node does
// not claim; it reads the claim to name its node.
func (a *Allocator) notClaimed(ctx context.Context, node string, ref store.BlockRef) error {
	c, err := a.store.GetClaim(ctx, ref)
	if err != nil {
		return notClaimedErr(node, ref, "")
	}
	return notClaimedErr(node, ref, c.Node)
}

func notClaimedErr(node string, ref store.BlockRef, claimant string) error {
	whose := "no claim names it"
	if claimant != "" && claimant != node {
		whose = fmt.Sprintf("its claim names node %q", claimant)
	}
	return fmt.Errorf("%w: node object %q holds block %s, but %s: none of its addresses is handed out ('ipkeeperctl check' reports it)",
		ErrBlockNotClaimed, node, ref, whose)
}

// verifyHandle checks an existing handle before an allocation returns it
// as is: its addresses in own's blocks against own's claims, each lent
// part against its lender's claim.
func (a *Allocator) verifyHandle(ctx context.Context, own store.Node, parts []ObservedPart) error {
	for _, p := range parts {
		if p.Object == own.Name {
			if err := a.verifyOwn(ctx, own, ownBlocks(own, p.Record.ID), nil); err != nil {
				return err
			}
			continue
		}
		for _, ip := range p.Record.IPs {
			if err := a.verifyLent(ctx, p.Object, store.BlockRef{Pool: ip.Pool, CIDR: ip.Block}); err != nil {
				return err
			}
		}
	}
	return nil
}

// knownClaimed reports whether every address of h in n's blocks is in a
// block known claimed by n's node at n's version (no read).
func (a *Allocator) knownClaimed(n store.Node, h ipam.Handle) bool {
	return len(a.unverified(n, ownBlocks(n, h.ID), nil)) == 0
}

// deleteClaim deletes claim c and forgets that its node claims the block.
func (a *Allocator) deleteClaim(ctx context.Context, c store.Claim) error {
	a.claims.drop(c.Node, c.BlockRef)
	return a.store.DeleteClaim(ctx, c)
}
