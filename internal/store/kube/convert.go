package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// Under v1alpha1 an IPAMNode held its node's whole object: every block's
// free queue, every record (as strings, or earlier as JSON objects under
// "handles") and the loans. v1alpha1 is no longer served, so no process
// writes that form any more; the objects stored in it are read under
// v1beta1, whose schema keeps those fields, and converted by the first
// read (GetNode, ListNodes): each block's state is written into its
// IPAMBlock, then the IPAMNode is rewritten as the head. While an IPAMNode
// holds blocks it is the truth, and a conversion that stopped between
// its writes is done again by the next read.

// wholeSpec returns the node object an IPAMNode in the v1alpha1 form
// holds.
func (w *headWire) wholeSpec() (store.NodeSpec, error) {
	spec := store.NodeSpec{Blocks: w.Blocks, Handles: w.Handles, Loans: w.Loans}
	if len(w.Records) > 0 && len(w.Handles) > 0 {
		return store.NodeSpec{}, fmt.Errorf("%w: both records and handles", store.ErrRecord)
	}
	if len(w.Records) > 0 {
		spec.Handles = make([]store.HandleSpec, len(w.Records))
		for i, r := range w.Records {
			h, err := store.ParseRecord(r)
			if err != nil {
				return store.NodeSpec{}, fmt.Errorf("record %d: %w", i, err)
			}
			spec.Handles[i] = h
		}
	}
	return spec, nil
}

// AnnotationConverted marks an IPAMBlock whose state a conversion wrote
// (every other write of the state drops it). A conversion overwrites a
// block's state only while it carries the mark: two conversions of one
// IPAMNode write the same states, but a conversion that was overtaken —
// another finished it, and the node wrote the block since — must not
// write over that.
const AnnotationConverted = "ipkeeper.io/converted"

// convert writes node object name, whose IPAMNode o is in the v1alpha1
// form, in parts: each block's state into its IPAMBlock (created when no
// claim was made for the block) at the version read, IPv4 blocks first,
// then the IPAMNode as the head at its version. ErrConflict: another
// writer (a concurrent conversion) came first; read again.
func (s *Store) convert(ctx context.Context, name string, o *object) error {
	w, err := s.decodeHead(o, name)
	if err != nil {
		return err
	}
	spec, err := w.wholeSpec()
	if err != nil {
		return fmt.Errorf("%w: %s: %w", store.ErrCorrupt, what(kindNode, o.Metadata.Name), err)
	}
	old, err := store.DecodeNode(name, spec)
	if err != nil {
		return fmt.Errorf("%s: %w", what(kindNode, o.Metadata.Name), err)
	}
	var refs []store.BlockRef
	for _, b := range old.Blocks {
		refs = append(refs, store.BlockRef{Pool: b.Pool, CIDR: b.CIDR})
	}
	slices.SortFunc(refs, compareFamily)
	frags := fragments(old, refs)
	for _, ref := range refs {
		bc, err := s.blockContent(old, ref, frags[ref])
		if err != nil {
			return fmt.Errorf("converting node object %q: %w", name, err)
		}
		bc.sum.converted = true
		if err := s.convertBlock(ctx, name, bc); err != nil {
			return fmt.Errorf("converting node object %q: %w", name, err)
		}
	}
	raw, err := json.Marshal(headSpec{Node: name, Loans: w.Loans})
	if err != nil {
		return err
	}
	body, err := s.newObject(kindNode, o.Metadata.Name, nil, raw, store.Version(o.Metadata.ResourceVersion))
	if err != nil {
		return err
	}
	if _, err := s.update(ctx, kindNode, o.Metadata.Name, body); err != nil {
		return fmt.Errorf("converting node object %q: %w", name, err)
	}
	return nil
}

// convertBlock writes the state bc into its IPAMBlock, which must be
// claimed by node or not claimed at all (then it is created).
func (s *Store) convertBlock(ctx context.Context, node string, bc blockContent) error {
	o, err := s.get(ctx, kindBlock, bc.name)
	if errors.Is(err, store.ErrNotFound) {
		body, err := s.blockBody(bc, "")
		if err != nil {
			return err
		}
		_, err = s.create(ctx, kindBlock, bc.name, body)
		if errors.Is(err, store.ErrExists) {
			return fmt.Errorf("%w: %w", store.ErrConflict, err)
		}
		return err
	}
	if err != nil {
		return err
	}
	b, err := s.decodeBlock(o, &bc.ref)
	if err != nil {
		return err
	}
	if b.state != nil && o.Metadata.Annotations[AnnotationConverted] == "" {
		return fmt.Errorf("%w: block %s was written since node object %q was converted", store.ErrConflict, bc.ref, node)
	}
	if b.claim.Node != node {
		return fmt.Errorf("%w: the IPAMNode of node %q holds block %s, which node %q claims: take the block out of it or delete the other claim",
			store.ErrCorrupt, node, bc.ref, b.claim.Node)
	}
	body, err := s.blockBody(bc, b.version)
	if err != nil {
		return err
	}
	_, err = s.update(ctx, kindBlock, bc.name, body)
	return err
}
