package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// A node object is stored in parts (docs/STORAGE.md): its head, the
// IPAMNode (the node's loans), and the state of each block it holds, in
// that block's IPAMBlock. Its Version is the composite of the parts'
// resourceVersions (store.CompositeVersion); a node object exists while
// its IPAMNode does or a block holds its state.

// headWire is an IPAMNode's spec: the node's name (which the object's
// name may only hash) and its loans. Blocks, Records and Handles are the
// form the objects had under v1alpha1 (every block and record of the node
// in it): read to convert such an object (convert.go), never written.
type headWire struct {
	Node    string             `json:"node"`
	Loans   []store.LoanSpec   `json:"loans,omitempty"`
	Blocks  []store.BlockSpec  `json:"blocks,omitempty"`
	Records []string           `json:"records,omitempty"`
	Handles []store.HandleSpec `json:"handles,omitempty"`
}

// whole reports whether the IPAMNode is in the v1alpha1 form, which
// always had blocks and records.
func (w *headWire) whole() bool { return w.Blocks != nil || w.Records != nil || w.Handles != nil }

// headSpec is the spec a write sends.
type headSpec struct {
	Node  string           `json:"node"`
	Loans []store.LoanSpec `json:"loans,omitempty"`
}

// decodeHead decodes an IPAMNode; with want set it must be that node's,
// else the node its spec names, stored under that node's object name.
func (s *Store) decodeHead(o *object, want string) (headWire, error) {
	var w headWire
	if err := json.Unmarshal(o.Spec, &w); err != nil {
		return headWire{}, fmt.Errorf("%w: %s: %v", store.ErrCorrupt, what(kindNode, o.Metadata.Name), err)
	}
	if want != "" && w.Node != want {
		return headWire{}, fmt.Errorf("%w: %s holds node %q, not %q", store.ErrCorrupt, what(kindNode, o.Metadata.Name), w.Node, want)
	}
	if err := store.ValidName("node", w.Node); err != nil {
		return headWire{}, fmt.Errorf("%w: %s: %w", store.ErrCorrupt, what(kindNode, o.Metadata.Name), err)
	}
	if name := s.names.object(w.Node); name != o.Metadata.Name {
		return headWire{}, fmt.Errorf("%w: %s holds node %q, whose object name is %q", store.ErrCorrupt, what(kindNode, o.Metadata.Name), w.Node, name)
	}
	return w, nil
}

// nodeBlocks keeps, of the IPAMBlocks objs, those holding the state of a
// block of node (all nodes when node is ""), by node.
func (s *Store) nodeBlocks(objs []object, node string) (map[string][]storedBlock, error) {
	out := map[string][]storedBlock{}
	for i := range objs {
		b, err := s.decodeBlock(&objs[i], nil)
		if err != nil {
			return nil, err
		}
		if b.state == nil || node != "" && b.claim.Node != node {
			continue
		}
		out[b.claim.Node] = append(out[b.claim.Node], b)
	}
	return out, nil
}

// maxConversions bounds how often one read converts a node object in the
// v1alpha1 form and reads it again (a concurrent conversion makes one
// fail).
const maxConversions = 4

// GetNode LISTs the IPAMBlocks labelled with the node, then GETs its
// IPAMNode: ErrNotFound when neither the IPAMNode nor a block's state is
// there. An IPAMNode in the v1alpha1 form is converted first.
func (s *Store) GetNode(ctx context.Context, name string) (store.Node, error) {
	if err := store.ValidName("node", name); err != nil {
		return store.Node{}, err
	}
	for range maxConversions {
		n, old, err := s.readNode(ctx, name)
		if err != nil || old == nil {
			return n, err
		}
		err = s.convert(ctx, name, old)
		if errors.Is(err, store.ErrDenied) {
			// Another node's credentials (a borrower reading its
			// lender): only the node itself or the controller may
			// convert its objects. Nothing is written against the old
			// form meanwhile; the caller tries again later.
			return store.Node{}, fmt.Errorf("%w: node object %q is still in the v1alpha1 form, which only its own node or the controller may convert (%v)", store.ErrUnavailable, name, err)
		}
		if err != nil && !errors.Is(err, store.ErrConflict) {
			return store.Node{}, err
		}
	}
	return store.Node{}, fmt.Errorf("%w: node object %q: its conversion from v1alpha1 kept failing", store.ErrConflict, name)
}

// readNode reads node object name; when its IPAMNode is in the v1alpha1
// form it returns that instead (old).
func (s *Store) readNode(ctx context.Context, name string) (store.Node, *object, error) {
	objs, err := s.list(ctx, kindBlock, s.selector(LabelNode+"="+labelValue(name)))
	if err != nil {
		return store.Node{}, nil, err
	}
	blocks, err := s.nodeBlocks(objs, name)
	if err != nil {
		return store.Node{}, nil, err
	}
	o, err := s.get(ctx, kindNode, s.names.object(name))
	switch {
	case errors.Is(err, store.ErrNotFound) && len(blocks[name]) == 0:
		return store.Node{}, nil, fmt.Errorf("%w: node object %q", store.ErrNotFound, name)
	case errors.Is(err, store.ErrNotFound):
		n, err := assemble(name, nil, "", blocks[name])
		return n, nil, err
	case err != nil:
		return store.Node{}, nil, err
	}
	w, err := s.decodeHead(o, name)
	if err != nil {
		return store.Node{}, nil, err
	}
	if w.whole() {
		return store.Node{}, o, nil
	}
	n, err := assemble(name, w.Loans, store.Version(o.Metadata.ResourceVersion), blocks[name])
	return n, nil, err
}

// ListNodes LISTs the partition's IPAMBlocks and IPAMNodes and assembles
// every node object; with LendsTo, the IPAMBlocks labelled
// lends.ipkeeper.io/<borrower> name the lenders, each read (GetNode) and
// kept when a record is the borrower's; with Sticky, those labelled
// sticky.ipkeeper.io/<identity> (listSticky).
func (s *Store) ListNodes(ctx context.Context, sel store.NodeSelector) ([]store.Node, error) {
	if sel.Sticky != "" {
		return s.listSticky(ctx, sel.Sticky)
	}
	if sel.LendsTo != "" {
		return s.listLenders(ctx, sel.LendsTo)
	}
	objs, err := s.list(ctx, kindBlock, s.selector())
	if err != nil {
		return nil, err
	}
	blocks, err := s.nodeBlocks(objs, "")
	if err != nil {
		return nil, err
	}
	heads, err := s.list(ctx, kindNode, s.selector())
	if err != nil {
		return nil, err
	}
	var out []store.Node
	for i := range heads {
		w, err := s.decodeHead(&heads[i], "")
		if err != nil {
			return nil, err
		}
		var n store.Node
		if w.whole() {
			n, err = s.GetNode(ctx, w.Node) // converts it
		} else {
			n, err = assemble(w.Node, w.Loans, store.Version(heads[i].Metadata.ResourceVersion), blocks[w.Node])
		}
		if err != nil {
			return nil, err
		}
		delete(blocks, w.Node)
		out = append(out, n)
	}
	// Node objects without an IPAMNode (its create or delete under way).
	for name, bs := range blocks {
		n, err := assemble(name, nil, "", bs)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b store.Node) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// listLenders returns the node objects holding a record of borrower's
// handles: the nodes of the IPAMBlocks (and of the IPAMNodes in the
// v1alpha1 form) labelled with the borrower, each read and checked.
func (s *Store) listLenders(ctx context.Context, borrower string) ([]store.Node, error) {
	if err := store.ValidName("node", borrower); err != nil {
		return nil, err
	}
	sel := s.selector(LendsPrefix + labelValue(borrower))
	objs, err := s.list(ctx, kindBlock, sel)
	if err != nil {
		return nil, err
	}
	blocks, err := s.nodeBlocks(objs, "")
	if err != nil {
		return nil, err
	}
	heads, err := s.list(ctx, kindNode, sel)
	if err != nil {
		return nil, err
	}
	names := slices.Collect(maps.Keys(blocks))
	for i := range heads {
		w, err := s.decodeHead(&heads[i], "")
		if err != nil {
			return nil, err
		}
		names = append(names, w.Node)
	}
	slices.Sort(names)
	var out []store.Node
	for _, name := range slices.Compact(names) {
		n, err := s.GetNode(ctx, name)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if slices.Contains(n.LendsTo(), borrower) {
			out = append(out, n)
		}
	}
	return out, nil
}
