package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// claimRefName validates a block ref and returns its object name.
func (s *Store) claimRefName(ref store.BlockRef) (string, error) {
	if err := store.ValidName("pool", ref.Pool); err != nil {
		return "", err
	}
	if !ref.CIDR.IsValid() || ref.CIDR != ref.CIDR.Masked() {
		return "", fmt.Errorf("%w: block %q of pool %q is not a masked prefix", store.ErrInvalid, ref.CIDR, ref.Pool)
	}
	return s.names.claim(ref.Pool, ref.CIDR), nil
}

// decodeClaim decodes an IPAMBlock as a claim (whether or not it holds
// its block's state); with want set it must be that block, else it must
// be the block its name says.
func (s *Store) decodeClaim(o *object, want *store.BlockRef) (store.Claim, error) {
	b, err := s.decodeBlock(o, want)
	return b.claim, err
}

func claimLabels(c store.Claim) map[string]string {
	return map[string]string{LabelNode: labelValue(c.Node), LabelPool: labelValue(c.Pool)}
}

// CreateClaim POSTs the block's IPAMBlock, labelled with its node and
// pool; the API server lets exactly one of concurrent creates of a name
// succeed.
func (s *Store) CreateClaim(ctx context.Context, c store.Claim) (store.Claim, error) {
	spec, err := store.EncodeClaim(c)
	if err != nil {
		return store.Claim{}, err
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return store.Claim{}, err
	}
	name := s.names.claim(c.Pool, c.CIDR)
	body, err := s.newObject(kindBlock, name, claimLabels(c), raw, "")
	if err != nil {
		return store.Claim{}, err
	}
	v, err := s.create(ctx, kindBlock, name, body)
	if err != nil {
		return store.Claim{}, fmt.Errorf("claim of %s: %w", c.BlockRef, err)
	}
	c.Version = v
	return c, nil
}

// GetClaim GETs the block's IPAMBlock.
func (s *Store) GetClaim(ctx context.Context, ref store.BlockRef) (store.Claim, error) {
	name, err := s.claimRefName(ref)
	if err != nil {
		return store.Claim{}, err
	}
	o, err := s.get(ctx, kindBlock, name)
	if err != nil {
		return store.Claim{}, err
	}
	return s.decodeClaim(o, &ref)
}

// ListClaims LISTs the IPAMBlocks labelled with the selector's node and/or
// pool (both when both are set) and keeps those whose spec matches.
func (s *Store) ListClaims(ctx context.Context, sel store.ClaimSelector) ([]store.Claim, error) {
	var reqs []string
	if sel.Node != "" {
		if err := store.ValidName("node", sel.Node); err != nil {
			return nil, err
		}
		reqs = append(reqs, LabelNode+"="+labelValue(sel.Node))
	}
	if sel.Pool != "" {
		if err := store.ValidName("pool", sel.Pool); err != nil {
			return nil, err
		}
		reqs = append(reqs, LabelPool+"="+labelValue(sel.Pool))
	}
	objs, err := s.listAt(ctx, kindBlock, s.selector(reqs...), sel.Cached)
	if err != nil {
		return nil, err
	}
	var out []store.Claim
	for i := range objs {
		c, err := s.decodeClaim(&objs[i], nil)
		if err != nil {
			return nil, err
		}
		if sel.Node != "" && c.Node != sel.Node || sel.Pool != "" && c.Pool != sel.Pool {
			continue
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b store.Claim) int { return a.BlockRef.Compare(b.BlockRef) })
	return out, nil
}

// DeleteClaim GETs the IPAMBlock and DELETEs it with a resourceVersion
// precondition: at c.Version, and only while its state (when its node
// uses the block) holds no address. The claim and the block's state are
// one object, whose version every write of the state changes.
func (s *Store) DeleteClaim(ctx context.Context, c store.Claim) error {
	name, err := s.claimRefName(c.BlockRef)
	if err != nil {
		return err
	}
	if c.Version == "" {
		return s.noVersion(ctx, kindBlock, name)
	}
	o, err := s.get(ctx, kindBlock, name)
	if err != nil {
		return err
	}
	b, err := s.decodeBlock(o, &c.BlockRef)
	switch {
	case err != nil:
		return err
	case b.version != c.Version:
		return fmt.Errorf("%w: %s is at version %q, not %q", store.ErrConflict, what(kindBlock, name), b.version, c.Version)
	case b.state != nil && len(b.state.Records) > 0:
		return fmt.Errorf("%w: %s holds %d handle records of node %q: release them, and take the block out of its node object, first",
			store.ErrConflict, what(kindBlock, name), len(b.state.Records), b.claim.Node)
	}
	return s.del(ctx, kindBlock, name, c.Version)
}
