package kvbacked

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// CreateClaim implements store.Store: the claim and its node index key in
// one transaction, on condition that the claim key is absent. When it is
// not, the error wraps store.ErrExists and names the holder.
func (s *Store) CreateClaim(ctx context.Context, c store.Claim) (store.Claim, error) {
	spec, err := store.EncodeClaim(c)
	if err != nil {
		return store.Claim{}, err
	}
	val, err := json.Marshal(spec)
	if err != nil {
		return store.Claim{}, fmt.Errorf("%w: claim of block %s: %v", store.ErrInvalid, c.BlockRef, err)
	}
	key := claimKey(c.BlockRef)
	what := fmt.Sprintf("claim block %s for node %q", c.BlockRef, c.Node)
	rev, err := s.txn(ctx, what, []kv.Cond{{Key: key}},
		[]kv.Op{{Key: key, Value: val}, {Key: nodeClaimKey(c.Node, c.BlockRef), Value: val}})
	if err != nil {
		err = createErr(what, err)
		if errors.Is(err, store.ErrExists) {
			if held, gerr := s.GetClaim(ctx, c.BlockRef); gerr == nil {
				err = fmt.Errorf("%w (held by node %q)", err, held.Node)
			}
		}
		return store.Claim{}, err
	}
	c.Version = stored(rev)
	s.observeClaim(c.BlockRef, c.Node, c.Version)
	return c, nil
}

// GetClaim implements store.Store.
func (s *Store) GetClaim(ctx context.Context, ref store.BlockRef) (store.Claim, error) {
	if _, err := store.EncodeClaim(store.Claim{BlockRef: ref, Node: "n"}); err != nil {
		return store.Claim{}, err
	}
	e, err := s.get(ctx, fmt.Sprintf("claim of block %s", ref), claimKey(ref))
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			s.observeClaim(ref, "", "")
		}
		return store.Claim{}, err
	}
	c, err := decodeClaim(e, "")
	if err == nil {
		s.observeClaim(ref, c.Node, c.Version)
	}
	return c, err
}

// decodeClaim decodes a claim or index entry and checks that it is stored
// under its own key; node, when not "", is the node an index key names.
func decodeClaim(e kv.KeyValue, node string) (store.Claim, error) {
	var spec store.ClaimSpec
	if err := json.Unmarshal(e.Value, &spec); err != nil {
		return store.Claim{}, fmt.Errorf("%w: claim %s: %v", store.ErrCorrupt, e.Key, err)
	}
	c, err := store.DecodeClaim(store.BlockRef{Pool: spec.Pool, CIDR: spec.CIDR}, spec)
	if err != nil {
		return store.Claim{}, fmt.Errorf("%w (key %s)", err, e.Key)
	}
	want := claimKey(c.BlockRef)
	if node != "" {
		want = nodeClaimKey(node, c.BlockRef)
	}
	if e.Key != want {
		return store.Claim{}, fmt.Errorf("%w: claim of block %s for node %q is stored as %s", store.ErrCorrupt, c.BlockRef, c.Node, e.Key)
	}
	c.Version = version(e.Version)
	return c, nil
}

// ListClaims implements store.Store: by node from the node's index keys,
// by pool or all from the claims' keys; sorted by pool, then CIDR.
func (s *Store) ListClaims(ctx context.Context, sel store.ClaimSelector) ([]store.Claim, error) {
	prefix, what := claimPrefix, "list claims"
	switch {
	case sel.Node != "" && sel.Pool != "":
		return nil, fmt.Errorf("%w: claim selector names node %q and pool %q; set one", store.ErrInvalid, sel.Node, sel.Pool)
	case sel.Node != "":
		if err := store.ValidName("node", sel.Node); err != nil {
			return nil, err
		}
		prefix, what = nodeClaimPrefix+sel.Node+"/", fmt.Sprintf("list claims of node %q", sel.Node)
	case sel.Pool != "":
		if err := store.ValidName("pool", sel.Pool); err != nil {
			return nil, err
		}
		prefix, what = claimPrefix+sel.Pool+"/", fmt.Sprintf("list claims of pool %q", sel.Pool)
	}
	es, err := s.list(ctx, what, prefix)
	if err != nil {
		return nil, err
	}
	var out []store.Claim
	for _, e := range es {
		c, err := decodeClaim(e, sel.Node)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if sel.Node != "" && !s.revs && len(out) > 0 {
		// Without kv.RevisionTxner the index key's version need not be
		// the claim's: read the claims.
		if out, err = s.claimsOf(ctx, what, out); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(out, func(a, b store.Claim) int { return a.Compare(b.BlockRef) })
	if sel.Node != "" {
		s.observeNodeClaims(sel.Node, out)
	}
	return out, nil
}

// claimsOf reads the claims the index entries idx name, keeping those that
// still name the same node.
func (s *Store) claimsOf(ctx context.Context, what string, idx []store.Claim) ([]store.Claim, error) {
	keys := make([]string, len(idx))
	for i, c := range idx {
		keys[i] = claimKey(c.BlockRef)
	}
	es, err := s.kv.Get(ctx, keys...)
	if err != nil {
		return nil, mapErr(what, err)
	}
	out := idx[:0]
	for i, e := range es {
		if e.Version == 0 {
			continue
		}
		c, err := decodeClaim(e, "")
		if err != nil {
			return nil, err
		}
		if c.Node == idx[i].Node {
			out = append(out, c)
		}
	}
	return out, nil
}

// DeleteClaim implements store.Store: the claim and its index key in one
// transaction, on condition that the claim is at c.Version and names
// c.Node.
func (s *Store) DeleteClaim(ctx context.Context, c store.Claim) error {
	if _, err := store.EncodeClaim(c); err != nil {
		return err
	}
	key, idx := claimKey(c.BlockRef), nodeClaimKey(c.Node, c.BlockRef)
	what := fmt.Sprintf("delete claim of block %s by node %q at version %q", c.BlockRef, c.Node, c.Version)
	v, ok := parseVersion(c.Version)
	if !ok {
		return s.casErr(ctx, what, key, nil)
	}
	// The value names the node: a claim passed with another node than it
	// names is not deleted, and its index key is the one deleted.
	val, err := json.Marshal(store.ClaimSpec{Pool: c.Pool, CIDR: c.CIDR, Node: c.Node})
	if err != nil {
		return fmt.Errorf("%w: %s: %v", store.ErrInvalid, what, err)
	}
	conds := []kv.Cond{{Key: key, Version: v, Value: val}}
	_, err = s.txn(ctx, what, conds, []kv.Op{{Key: key, Delete: true}, {Key: idx, Delete: true}})
	s.observeClaim(c.BlockRef, "", "")
	if err != nil {
		return s.casErr(ctx, what, key, err)
	}
	return nil
}
