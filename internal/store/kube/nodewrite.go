package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// nodeWrite is one write of a node object: the requests it sends, in
// order, each a compare-and-swap on one object at the version in parts.
// There is no transaction across objects: a write that fails after some
// of its requests leaves those written (docs/STORAGE.md, crash points).
type nodeWrite struct {
	n      store.Node
	parts  store.Parts
	create bool
	// head: the IPAMNode is written, before the blocks.
	head bool
	// blocks are the states PUT, IPv4 blocks first, then by ref.
	blocks []blockContent
	// removed are the IPAMBlocks DELETEd (blocks the object no longer
	// holds: claim and state are one object), after the PUTs.
	removed []store.BlockRef
	// patch: each block the object held when read is patched (only the
	// records of ids, its free queue and summary), not PUT whole. ids
	// are the handles whose records are new, changed or dropped.
	patch bool
	ids   []string
}

// planWrite validates n and returns its write. A node object that was
// not read from this store, or is written at another version than it
// was read at, is written whole against the object as stored now, which
// must be at n.Version; an unchanged one is read and compared likewise,
// then writes every part (so that every writer that read it before
// fails).
func (s *Store) planWrite(ctx context.Context, n store.Node, create bool) (nodeWrite, error) {
	if err := store.ValidName("node", n.Name); err != nil {
		return nodeWrite{}, err
	}
	w := nodeWrite{create: create}
	p, read := n.StoredParts()
	whole := !create && (!read || store.CompositeVersion(p) != n.Version)
	orig := n
	if create || whole {
		n = n.Normalized()
		p = store.Parts{}
	}
	c, err := store.Changes(n)
	if err != nil {
		return nodeWrite{}, err
	}
	refs, removed := c.Blocks, c.Removed
	w.head = c.Head || create
	w.patch = !create && !whole
	w.ids = append(slices.Clone(c.Records), c.Dropped...)
	if !whole && c.Empty() {
		// A fence: every writer that read the object before must fail,
		// and a stale fence must write nothing. The object is read and
		// compared, then every part is written.
		cur, err := s.GetNode(ctx, n.Name)
		if err != nil {
			return nodeWrite{}, err
		}
		if cur.Version != n.Version {
			return nodeWrite{}, fmt.Errorf("%w: node object %q is at version %q, not %q", store.ErrConflict, n.Name, cur.Version, n.Version)
		}
		w.head = true
		w.patch = false
		refs = slices.Collect(maps.Keys(p.Blocks))
	}
	slices.SortFunc(refs, compareFamily)
	frags := fragments(n, refs)
	for _, ref := range refs {
		bc, err := s.blockContent(n, ref, frags[ref])
		if err != nil {
			return nodeWrite{}, err
		}
		w.blocks = append(w.blocks, bc)
	}
	if whole {
		// Checked and encoded: now against the object as stored.
		cur, err := s.GetNode(ctx, n.Name)
		if err != nil {
			return nodeWrite{}, err
		}
		if cur.Version != n.Version {
			return nodeWrite{}, fmt.Errorf("%w: node object %q is at version %q, not %q", store.ErrConflict, n.Name, cur.Version, n.Version)
		}
		p, _ = cur.StoredParts()
		w.head = true
		for _, b := range cur.Blocks {
			if ref := (store.BlockRef{Pool: b.Pool, CIDR: b.CIDR}); !hasBlock(n, ref) {
				removed = append(removed, ref)
			}
		}
	}
	slices.SortFunc(removed, compareFamily)
	w.n, w.parts, w.removed = orig, p, removed
	return w, nil
}

func hasBlock(n store.Node, ref store.BlockRef) bool {
	_, ok := n.Block(ref)
	return ok
}

// send sends w's requests in order and returns the node as stored (as
// its caller gave it, with the versions of its parts).
func (s *Store) send(ctx context.Context, w nodeWrite) (store.Node, error) {
	n := w.n
	parts := store.Parts{Head: w.parts.Head, Blocks: maps.Clone(w.parts.Blocks)}
	if parts.Blocks == nil {
		parts.Blocks = map[store.BlockRef]store.Version{}
	}
	if w.head {
		v, err := s.writeHead(ctx, n, parts.Head, w.create)
		if err != nil {
			return store.Node{}, err
		}
		parts.Head = v
	}
	for _, bc := range w.blocks {
		v, known := parts.Blocks[bc.ref]
		var nv store.Version
		var err error
		switch {
		case known && w.patch:
			nv, err = s.patch(ctx, kindBlock, bc.name, v, writeNonce(), bc.patchOps(w.ids, s.prefix))
		case !known:
			if v, err = s.unusedBlock(ctx, n.Name, bc.ref, bc.name); err != nil {
				return store.Node{}, err
			}
			fallthrough
		default:
			var body []byte
			if body, err = s.blockBody(bc, v); err != nil {
				return store.Node{}, err
			}
			nv, err = s.update(ctx, kindBlock, bc.name, body)
		}
		if err != nil {
			return store.Node{}, s.partErr(ctx, n.Name, fmt.Errorf("block %s: %w", bc.ref, err))
		}
		parts.Blocks[bc.ref] = nv
	}
	for _, ref := range w.removed {
		name := s.names.claim(ref.Pool, ref.CIDR)
		if err := s.del(ctx, kindBlock, name, parts.Blocks[ref]); err != nil {
			return store.Node{}, s.partErr(ctx, n.Name, fmt.Errorf("block %s: %w", ref, err))
		}
		delete(parts.Blocks, ref)
	}
	return store.AsStored(n, parts), nil
}

// writeHead POSTs (create, or a node object without one) or PUTs at v
// the node's IPAMNode and returns its new version.
func (s *Store) writeHead(ctx context.Context, n store.Node, v store.Version, create bool) (store.Version, error) {
	spec := headSpec{Node: n.Name}
	for _, l := range n.Loans {
		spec.Loans = append(spec.Loans, store.LoanSpec(l))
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return "", fmt.Errorf("%w: node object %q: %v", store.ErrInvalid, n.Name, err)
	}
	name := s.names.object(n.Name)
	body, err := s.newObject(kindNode, name, nil, raw, v)
	if err != nil {
		return "", err
	}
	if v == "" {
		nv, err := s.create(ctx, kindNode, name, body)
		if errors.Is(err, store.ErrExists) && !create {
			err = fmt.Errorf("%w: %w", store.ErrConflict, err)
		}
		return nv, err
	}
	nv, err := s.update(ctx, kindNode, name, body)
	if err != nil {
		return "", s.partErr(ctx, n.Name, err)
	}
	return nv, nil
}

// unusedBlock GETs the IPAMBlock of a block a node object takes on: it
// must be claimed by the node (a write never creates a claim) and hold no
// state yet (else the write did not read it). It returns its version.
func (s *Store) unusedBlock(ctx context.Context, node string, ref store.BlockRef, name string) (store.Version, error) {
	o, err := s.get(ctx, kindBlock, name)
	if errors.Is(err, store.ErrNotFound) {
		return "", fmt.Errorf("%w: node object %q takes on block %s, which is not claimed (no IPAMBlock): a node object holds only blocks its node claims", store.ErrConflict, node, ref)
	}
	if err != nil {
		return "", err
	}
	b, err := s.decodeBlock(o, &ref)
	switch {
	case err != nil:
		return "", err
	case b.claim.Node != node:
		return "", fmt.Errorf("%w: node object %q takes on block %s, which node %q claims", store.ErrConflict, node, ref, b.claim.Node)
	case b.state != nil:
		return "", fmt.Errorf("%w: node object %q takes on block %s, whose state it did not read", store.ErrConflict, node, ref)
	}
	return b.version, nil
}

// partErr tells, for a request on a part that found it gone, whether the
// node object is gone (ErrNotFound) or changed (ErrConflict).
func (s *Store) partErr(ctx context.Context, node string, err error) error {
	if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if _, _, rerr := s.readNode(ctx, node); rerr == nil {
		return fmt.Errorf("%w: node object %q: %w", store.ErrConflict, node, err)
	}
	return err
}

// CreateNode POSTs the node's IPAMNode, then PUTs the state of each of
// its blocks into its IPAMBlock, which its node must claim.
func (s *Store) CreateNode(ctx context.Context, n store.Node) (store.Node, error) {
	n.Version = ""
	w, err := s.planWrite(ctx, n, true)
	if err != nil {
		return store.Node{}, err
	}
	return s.send(ctx, w)
}

// UpdateNode PUTs, each at the version n was read with, the IPAMNode when
// the loans changed and the IPAMBlock of each block whose state changed
// (store.Changes), and DELETEs the IPAMBlocks of the blocks it no longer
// holds.
func (s *Store) UpdateNode(ctx context.Context, n store.Node) (store.Node, error) {
	if n.Version == "" {
		if err := store.ValidName("node", n.Name); err != nil {
			return store.Node{}, err
		}
		return store.Node{}, s.noVersion(ctx, kindNode, s.names.object(n.Name))
	}
	w, err := s.planWrite(ctx, n, false)
	if err != nil {
		return store.Node{}, err
	}
	return s.send(ctx, w)
}

// DeleteNode reads the node object and, at n.Version, DELETEs the
// IPAMBlock of each of its blocks, then its IPAMNode, each with a
// resourceVersion precondition.
func (s *Store) DeleteNode(ctx context.Context, n store.Node) error {
	if err := store.ValidName("node", n.Name); err != nil {
		return err
	}
	if n.Version == "" {
		return s.noVersion(ctx, kindNode, s.names.object(n.Name))
	}
	cur, err := s.GetNode(ctx, n.Name)
	if err != nil {
		return err
	}
	if cur.Version != n.Version {
		return fmt.Errorf("%w: node object %q is at version %q, not %q", store.ErrConflict, n.Name, cur.Version, n.Version)
	}
	p, _ := cur.StoredParts()
	refs := slices.SortedFunc(maps.Keys(p.Blocks), compareFamily)
	for _, ref := range refs {
		if err := s.del(ctx, kindBlock, s.names.claim(ref.Pool, ref.CIDR), p.Blocks[ref]); err != nil {
			return s.partErr(ctx, n.Name, err)
		}
	}
	if p.Head == "" {
		return nil
	}
	return s.partErr(ctx, n.Name, s.del(ctx, kindNode, s.names.object(n.Name), p.Head))
}
