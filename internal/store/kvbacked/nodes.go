package kvbacked

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// GetNode implements store.Store: the node's parts, in one read of its
// prefix.
func (s *Store) GetNode(ctx context.Context, name string) (store.Node, error) {
	if err := store.ValidName("node", name); err != nil {
		return store.Node{}, err
	}
	what := fmt.Sprintf("node object %q", name)
	es, err := s.list(ctx, what, nodePartsPrefix(name))
	if err != nil {
		return store.Node{}, err
	}
	n, err := decodeParts(name, es)
	switch {
	case errors.Is(err, store.ErrNotFound):
		s.observe(name, nil, "", false)
		return store.Node{}, fmt.Errorf("%w: %s", store.ErrNotFound, what)
	case err != nil:
		return store.Node{}, err
	}
	s.observeNode(n, false)
	return n, nil
}

// nodeWrite validates n and returns the conditions and operations of a
// write of it: the head put at n's version (every write of a node puts
// its head, so the head's version is the object's), the parts that
// changed against what n was read with put or deleted, and the lends key
// of every borrower of a changed record. A node object that was not read
// from this store, or not at n.Version, is written against the parts
// listed now.
func (s *Store) nodeWrite(ctx context.Context, n store.Node, create bool) ([]kv.Cond, []kv.Op, error) {
	if err := store.ValidName("node", n.Name); err != nil {
		return nil, nil, err
	}
	if p, read := n.StoredParts(); read && p.Head != n.Version {
		// Read at another version than it is written at: what it was
		// read with is not the state its write replaces, so it is
		// written whole, against the parts listed now.
		n = n.Normalized()
	}
	head := headKey(n.Name)
	var conds []kv.Cond
	if create {
		conds = []kv.Cond{{Key: head}}
	} else {
		v, ok := parseVersion(n.Version)
		if !ok {
			return nil, nil, s.casErr(ctx, fmt.Sprintf("update node object %q at version %q", n.Name, n.Version), head, nil)
		}
		conds = []kv.Cond{{Key: head, Version: v}}
	}
	c, err := store.Changes(n)
	if err != nil {
		return nil, nil, err
	}
	headVal, err := json.Marshal(headSpec{Loans: loanSpecs(n.Loans)})
	if err != nil {
		return nil, nil, fmt.Errorf("%w: node object %q: %v", store.ErrInvalid, n.Name, err)
	}
	ops := []kv.Op{{Key: head, Value: headVal}}
	if _, read := n.StoredParts(); !read && !create {
		// Not read from this store: every part it does not hold goes.
		es, err := s.list(ctx, fmt.Sprintf("node object %q", n.Name), nodePartsPrefix(n.Name))
		if err != nil {
			return nil, nil, err
		}
		keep := map[string]bool{head: true}
		for _, b := range n.Blocks {
			keep[blockPartKey(n.Name, store.BlockRef{Pool: b.Pool, CIDR: b.CIDR})] = true
		}
		for _, h := range n.Handles {
			keep[recordKey(n.Name, h.ID)] = true
		}
		for _, e := range es {
			if !keep[e.Key] {
				ops = append(ops, kv.Op{Key: e.Key, Delete: true})
			}
		}
	}
	for _, ref := range c.Removed {
		ops = append(ops, kv.Op{Key: blockPartKey(n.Name, ref), Delete: true})
	}
	for _, ref := range c.Blocks {
		b, _ := n.Block(ref)
		val, _ := json.Marshal(store.BlockSpec{Pool: b.Pool, CIDR: b.CIDR, Free: store.FormatQueue(b.Free)})
		ops = append(ops, kv.Op{Key: blockPartKey(n.Name, ref), Value: val})
	}
	for _, id := range c.Dropped {
		ops = append(ops, kv.Op{Key: recordKey(n.Name, id), Delete: true})
	}
	borrowers, sticky := map[string]bool{}, map[string]bool{}
	for _, id := range c.Records {
		h, _ := n.Handle(id)
		spec := store.EncodeHandle(h, n.Name)
		ops = append(ops, kv.Op{Key: recordKey(n.Name, id), Value: []byte(store.FormatRecord(&spec))})
		if h.Node != n.Name && !borrowers[h.Node] {
			borrowers[h.Node] = true
			ops = append(ops, kv.Op{Key: lendsKey(h.Node, n.Name), Value: []byte{}})
		}
		if h.Sticky != "" && !sticky[h.Sticky] {
			// In the record's transaction: the index never misses a
			// record written since it exists.
			sticky[h.Sticky] = true
			ops = append(ops, kv.Op{Key: stickyKey(h.Sticky, n.Name), Value: []byte{}})
		}
	}
	return conds, ops, nil
}

// CreateNode implements store.Store.
func (s *Store) CreateNode(ctx context.Context, n store.Node) (store.Node, error) {
	n.Version = ""
	conds, ops, err := s.nodeWrite(ctx, n, true)
	if err != nil {
		return store.Node{}, err
	}
	what := fmt.Sprintf("create node object %q", n.Name)
	rev, err := s.txn(ctx, what, conds, ops)
	if err != nil {
		s.observe(n.Name, nil, "", !failedCond(err))
		return store.Node{}, createErr(what, err)
	}
	n = s.written(n, rev)
	s.observeNode(n, true)
	return n, nil
}

// UpdateNode implements store.Store: one kv transaction comparing the
// node's head at its version and writing what changed. It reads nothing
// unless the compare failed (or n was not read from this store).
func (s *Store) UpdateNode(ctx context.Context, n store.Node) (store.Node, error) {
	conds, ops, err := s.nodeWrite(ctx, n, false)
	if err != nil {
		return store.Node{}, err
	}
	what := fmt.Sprintf("update node object %q at version %q", n.Name, n.Version)
	rev, err := s.txn(ctx, what, conds, ops)
	if err != nil {
		s.observe(n.Name, nil, "", !failedCond(err))
		return store.Node{}, s.casErr(ctx, what, conds[0].Key, err)
	}
	n = s.written(n, rev)
	s.observeNode(n, true)
	return n, nil
}

// written returns n as stored by a write at rev: every part it holds at
// rev when the backend told the version, else unknown (a later write
// from it conflicts and reads).
func (s *Store) written(n store.Node, rev int64) store.Node {
	v := stored(rev)
	p := store.Parts{Head: v, Blocks: make(map[store.BlockRef]store.Version, len(n.Blocks))}
	for _, b := range n.Blocks {
		p.Blocks[store.BlockRef{Pool: b.Pool, CIDR: b.CIDR}] = v
	}
	return store.AsStoredAt(n, p, v)
}

// DeleteNode implements store.Store: every part of the node, at its
// head's version. It deletes the lends keys of the borrowers n's records
// name and the sticky index entries of their identities; others left
// behind are removed by ListNodes{LendsTo} and ListNodes{Sticky}.
func (s *Store) DeleteNode(ctx context.Context, n store.Node) error {
	if err := store.ValidName("node", n.Name); err != nil {
		return err
	}
	key := headKey(n.Name)
	what := fmt.Sprintf("delete node object %q at version %q", n.Name, n.Version)
	v, ok := parseVersion(n.Version)
	if !ok {
		return s.casErr(ctx, what, key, nil)
	}
	es, err := s.list(ctx, what, nodePartsPrefix(n.Name))
	if err != nil {
		return err
	}
	var ops []kv.Op
	for _, e := range es {
		ops = append(ops, kv.Op{Key: e.Key, Delete: true})
	}
	for _, b := range n.LendsTo() {
		if store.ValidName("node", b) == nil {
			ops = append(ops, kv.Op{Key: lendsKey(b, n.Name), Delete: true})
		}
	}
	for _, id := range n.StickyIDs() {
		ops = append(ops, kv.Op{Key: stickyKey(id, n.Name), Delete: true})
	}
	if _, err := s.txn(ctx, what, []kv.Cond{{Key: key, Version: v}}, ops); err != nil {
		s.observe(n.Name, nil, "", !failedCond(err))
		return s.casErr(ctx, what, key, err)
	}
	s.observe(n.Name, nil, "", true)
	return nil
}

// ListNodes implements store.Store: every node object (one read of
// every node's parts), or the lenders of sel.LendsTo found by its lends
// keys and checked by their content.
func (s *Store) ListNodes(ctx context.Context, sel store.NodeSelector) ([]store.Node, error) {
	if sel.Sticky != "" {
		return s.listSticky(ctx, sel.Sticky)
	}
	if sel.LendsTo == "" {
		es, err := s.list(ctx, "list node objects", nodePrefix)
		if err != nil {
			return nil, err
		}
		var out []store.Node
		for len(es) > 0 {
			if IsMovedNode(es[0]) {
				es = es[1:] // left by the migration that split the node (MovedNodeValue)
				continue
			}
			name, _, _ := strings.Cut(strings.TrimPrefix(es[0].Key, nodePrefix), "/")
			i := 0
			for i < len(es) && strings.HasPrefix(es[i].Key, nodePartsPrefix(name)) {
				i++
			}
			if i == 0 {
				return nil, fmt.Errorf("%w: key %s is no part of a node object", store.ErrCorrupt, es[0].Key)
			}
			n, err := decodeParts(name, es[:i])
			if err != nil {
				return nil, err
			}
			out = append(out, n)
			es = es[i:]
		}
		return out, nil
	}
	b := sel.LendsTo
	if err := store.ValidName("node", b); err != nil {
		return nil, err
	}
	what := fmt.Sprintf("list the lenders of node %q", b)
	idx, err := s.list(ctx, what, lendsPrefix+b+"/")
	if err != nil || len(idx) == 0 {
		return nil, err
	}
	var out []store.Node
	for _, e := range idx {
		lender := strings.TrimPrefix(e.Key, lendsPrefix+b+"/")
		n, err := s.GetNode(ctx, lender)
		switch {
		case err == nil && slices.Contains(n.LendsTo(), b):
			out = append(out, n)
			continue
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return nil, err
		}
		v, _ := parseVersion(n.Version)
		if err := s.dropLends(ctx, e, kv.KeyValue{Key: headKey(lender), Version: v}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// dropLends deletes the stale lends entry idx of a lender found at node
// (absent: Version 0), on condition that the lender is still at that
// version: a lender written since may lend again, and its write put the
// entry back. A lost race is not an error: the entry is left for the next
// look.
func (s *Store) dropLends(ctx context.Context, idx, node kv.KeyValue) error {
	what := "delete stale " + idx.Key
	_, err := s.txn(ctx, what,
		[]kv.Cond{{Key: node.Key, Version: node.Version}, {Key: idx.Key, Version: idx.Version}},
		[]kv.Op{{Key: idx.Key, Delete: true}})
	if err == nil || failedCond(err) {
		return nil
	}
	return mapErr(what, err)
}
