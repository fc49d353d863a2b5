package kvbacked

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// GetNode implements store.Store.
func (s *Store) GetNode(ctx context.Context, name string) (store.Node, error) {
	if err := store.ValidName("node", name); err != nil {
		return store.Node{}, err
	}
	e, err := s.get(ctx, fmt.Sprintf("node object %q", name), nodeKey(name))
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			s.observe(name, nil, "", false)
		}
		return store.Node{}, err
	}
	n, err := decodeNode(name, e)
	if err == nil {
		s.observe(name, e.Value, n.Version, false)
	}
	return n, err
}

func decodeNode(name string, e kv.KeyValue) (store.Node, error) {
	n, err := store.UnmarshalNode(name, e.Value)
	if err != nil {
		return store.Node{}, err
	}
	n.Version = version(e.Version)
	return n, nil
}

// nodeWrite validates n and returns the puts of a write of it: the node
// key and the lends key of every borrower.
func (s *Store) nodeWrite(n store.Node) ([]kv.Op, error) {
	val, err := store.MarshalNode(n)
	if err != nil {
		return nil, err
	}
	if err := s.Limits().Fits(fmt.Sprintf("node object %q", n.Name), len(val)); err != nil {
		return nil, err
	}
	ops := []kv.Op{{Key: nodeKey(n.Name), Value: val}}
	for _, b := range n.LendsTo() {
		ops = append(ops, kv.Op{Key: lendsKey(b, n.Name), Value: []byte{}})
	}
	return ops, nil
}

// CreateNode implements store.Store.
func (s *Store) CreateNode(ctx context.Context, n store.Node) (store.Node, error) {
	ops, err := s.nodeWrite(n)
	if err != nil {
		return store.Node{}, err
	}
	what := fmt.Sprintf("create node object %q", n.Name)
	rev, err := s.txn(ctx, what, []kv.Cond{{Key: ops[0].Key}}, ops)
	if err != nil {
		s.observe(n.Name, nil, "", !failedCond(err))
		return store.Node{}, createErr(what, err)
	}
	n.Version = stored(rev)
	s.observe(n.Name, ops[0].Value, n.Version, true)
	return n, nil
}

// UpdateNode implements store.Store: one kv transaction comparing the node
// key's version, putting the node key and its borrowers' lends keys. It
// reads nothing unless the compare failed.
func (s *Store) UpdateNode(ctx context.Context, n store.Node) (store.Node, error) {
	ops, err := s.nodeWrite(n)
	if err != nil {
		return store.Node{}, err
	}
	key := ops[0].Key
	what := fmt.Sprintf("update node object %q at version %q", n.Name, n.Version)
	v, ok := parseVersion(n.Version)
	if !ok {
		return store.Node{}, s.casErr(ctx, what, key, nil)
	}
	rev, err := s.txn(ctx, what, []kv.Cond{{Key: key, Version: v}}, ops)
	if err != nil {
		s.observe(n.Name, nil, "", !failedCond(err))
		return store.Node{}, s.casErr(ctx, what, key, err)
	}
	n.Version = stored(rev)
	s.observe(n.Name, ops[0].Value, n.Version, true)
	return n, nil
}

// DeleteNode implements store.Store. It deletes the lends keys of the
// borrowers n's records name; others left behind are removed by
// ListNodes{LendsTo}.
func (s *Store) DeleteNode(ctx context.Context, n store.Node) error {
	if err := store.ValidName("node", n.Name); err != nil {
		return err
	}
	key := nodeKey(n.Name)
	what := fmt.Sprintf("delete node object %q at version %q", n.Name, n.Version)
	v, ok := parseVersion(n.Version)
	if !ok {
		return s.casErr(ctx, what, key, nil)
	}
	ops := []kv.Op{{Key: key, Delete: true}}
	for _, b := range n.LendsTo() {
		if store.ValidName("node", b) == nil {
			ops = append(ops, kv.Op{Key: lendsKey(b, n.Name), Delete: true})
		}
	}
	if _, err := s.txn(ctx, what, []kv.Cond{{Key: key, Version: v}}, ops); err != nil {
		s.observe(n.Name, nil, "", !failedCond(err))
		return s.casErr(ctx, what, key, err)
	}
	s.observe(n.Name, nil, "", true)
	return nil
}

// ListNodes implements store.Store: every node object, or the lenders of
// sel.LendsTo found by its lends keys and checked by their content.
func (s *Store) ListNodes(ctx context.Context, sel store.NodeSelector) ([]store.Node, error) {
	if sel.LendsTo == "" {
		es, err := s.list(ctx, "list node objects", nodePrefix)
		if err != nil {
			return nil, err
		}
		var out []store.Node
		for _, e := range es {
			n, err := decodeNode(strings.TrimPrefix(e.Key, nodePrefix), e)
			if err != nil {
				return nil, err
			}
			out = append(out, n)
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
	keys := make([]string, len(idx))
	for i, e := range idx {
		keys[i] = nodeKey(strings.TrimPrefix(e.Key, lendsPrefix+b+"/"))
	}
	es, err := s.kv.Get(ctx, keys...)
	if err != nil {
		return nil, mapErr(what, err)
	}
	var out []store.Node
	for i, e := range es {
		name := strings.TrimPrefix(keys[i], nodePrefix)
		if e.Version != 0 {
			n, err := decodeNode(name, e)
			if err != nil {
				return nil, err
			}
			if slices.Contains(n.LendsTo(), b) {
				out = append(out, n)
				continue
			}
		}
		if err := s.dropLends(ctx, idx[i], e); err != nil {
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
