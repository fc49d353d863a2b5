package consistency

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// NodeNamer is implemented by a typed store that can list the names of
// its node objects without decoding them. CheckStore uses it when
// ListNodes fails on an object that cannot be decoded, so that every
// other object is still checked and the broken ones are reported by name.
// Without it, the names are gathered from the claims, loans and records
// of the objects that can be read, and an object none of them names is
// not seen (CheckStore then repairs nothing that needs to know every
// object).
type NodeNamer interface {
	// NodeNames returns the names of every node object, sorted.
	NodeNames(ctx context.Context) ([]string, error)
}

// view is the typed store as read by one pass: objects read one at a
// time, so not a snapshot — every finding is confirmed by a second look
// before it is reported or repaired.
type view struct {
	pools   map[string]store.Pool
	badPool map[string]bool
	// poolsListed: ListPools succeeded (pools holds every pool).
	poolsListed bool

	claims  map[store.BlockRef]store.Claim
	nclaims int
	// claimsListed: ListClaims succeeded; else listedPools names the
	// pools whose claims could still be listed one pool at a time.
	claimsListed bool
	listedPools  map[string]bool

	nodes   map[string]store.Node
	badNode map[string]bool
	// nodesComplete: every node object was found (listed, or named by
	// NodeNamer); else only the objects something names were read.
	nodesComplete bool

	// corrupt are the objects and lists that could not be decoded.
	corrupt []storeFinding
}

// claimsBlind reports whether claims of pool may exist unseen.
func (v *view) claimsBlind(pool string) bool {
	return !v.claimsListed && !v.listedPools[pool]
}

// pool returns the pool named name; known is false when it could not be
// read, exists whether it is stored.
func (v *view) pool(name string) (p store.Pool, exists, known bool) {
	if v.badPool[name] {
		return store.Pool{}, false, false
	}
	p, exists = v.pools[name]
	return p, exists, true
}

func readView(ctx context.Context, s store.Store) (*view, error) {
	v := &view{
		pools: map[string]store.Pool{}, badPool: map[string]bool{},
		claims: map[store.BlockRef]store.Claim{}, listedPools: map[string]bool{},
		nodes: map[string]store.Node{}, badNode: map[string]bool{},
	}
	ps, err := s.ListPools(ctx)
	switch {
	case err == nil:
		v.poolsListed = true
		for _, p := range ps {
			v.pools[p.Spec.Name] = p
		}
	case errors.Is(err, store.ErrCorrupt):
		v.listCorrupt("pools", err)
	default:
		return nil, fmt.Errorf("consistency: list pools: %w", err)
	}
	cs, err := s.ListClaims(ctx, store.ClaimSelector{})
	switch {
	case err == nil:
		v.claimsListed = true
		for _, c := range cs {
			v.addClaim(c)
		}
	case errors.Is(err, store.ErrCorrupt):
		v.listCorrupt("claims", err)
	default:
		return nil, fmt.Errorf("consistency: list claims: %w", err)
	}
	if err := v.readNodes(ctx, s); err != nil {
		return nil, err
	}
	if !v.poolsListed {
		if err := v.readNamedPools(ctx, s); err != nil {
			return nil, err
		}
	}
	if !v.claimsListed {
		if err := v.readPoolClaims(ctx, s); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func (v *view) listCorrupt(what string, err error) {
	v.corrupt = append(v.corrupt, storeFinding{Problem: Problem{Kind: KindCorrupt, Key: what,
		Detail: fmt.Sprintf("the %s cannot all be read: %v", what, err)}})
}

func (v *view) addClaim(c store.Claim) {
	if _, dup := v.claims[c.BlockRef]; !dup {
		v.claims[c.BlockRef] = c
		v.nclaims++
	}
}

// readPoolClaims lists, when the list of every claim failed, the claims
// of each pool known (stored, or named by a node object's block) on its
// own, and reads the node objects they name that were not read yet.
func (v *view) readPoolClaims(ctx context.Context, s store.Store) error {
	names := map[string]bool{}
	for name := range v.pools {
		names[name] = true
	}
	for name := range v.badPool {
		names[name] = true
	}
	for _, n := range v.nodes {
		for _, b := range n.Blocks {
			names[b.Pool] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		cs, err := s.ListClaims(ctx, store.ClaimSelector{Pool: name})
		switch {
		case err == nil:
			v.listedPools[name] = true
			for _, c := range cs {
				v.addClaim(c)
			}
		case errors.Is(err, store.ErrCorrupt):
			v.corrupt = append(v.corrupt, storeFinding{Problem: Problem{Kind: KindCorrupt, Key: "claims/" + name, Pool: name,
				Detail: fmt.Sprintf("the claims of pool %s cannot all be read: %v", name, err)}})
		default:
			return fmt.Errorf("consistency: list claims of pool %q: %w", name, err)
		}
	}
	if v.nodesComplete {
		return nil
	}
	var more []string
	for _, c := range v.claims {
		if _, ok := v.nodes[c.Node]; !ok && !v.badNode[c.Node] {
			more = append(more, c.Node)
		}
	}
	return v.readNamed(ctx, s, more)
}

// readNodes lists every node object or, when one cannot be decoded, reads
// them one at a time by name, reporting each that cannot be decoded.
func (v *view) readNodes(ctx context.Context, s store.Store) error {
	ns, err := s.ListNodes(ctx, store.NodeSelector{})
	switch {
	case err == nil:
		v.nodesComplete = true
		for _, n := range ns {
			v.nodes[n.Name] = n
		}
		return nil
	case !errors.Is(err, store.ErrCorrupt):
		return fmt.Errorf("consistency: list node objects: %w", err)
	}
	var names []string
	if nn, ok := s.(NodeNamer); ok {
		if names, err = nn.NodeNames(ctx); err != nil {
			return fmt.Errorf("consistency: list node object names: %w", err)
		}
		v.nodesComplete = true
	} else {
		v.listCorrupt("nodes", err)
		for _, c := range v.claims {
			names = append(names, c.Node)
		}
	}
	return v.readNamed(ctx, s, names)
}

// readNamed reads the node objects names lists one at a time, reporting
// those that cannot be decoded and, unless every object is known anyway,
// following the lenders and borrowers each names.
func (v *view) readNamed(ctx context.Context, s store.Store, names []string) error {
	seen := map[string]bool{}
	for len(names) > 0 {
		name := names[0]
		names = names[1:]
		if _, done := v.nodes[name]; seen[name] || done || v.badNode[name] {
			continue
		}
		seen[name] = true
		n, err := s.GetNode(ctx, name)
		switch {
		case errors.Is(err, store.ErrNotFound):
			continue
		case errors.Is(err, store.ErrCorrupt):
			v.badNode[name] = true
			v.corrupt = append(v.corrupt, corruptNode(name, err))
			continue
		case err != nil:
			return fmt.Errorf("consistency: read node object %q: %w", name, err)
		}
		v.nodes[name] = n
		if !v.nodesComplete {
			// Follow what the object names: its lenders and borrowers.
			for _, l := range n.Loans {
				names = append(names, l.Lender)
			}
			names = append(names, n.LendsTo()...)
		}
	}
	return nil
}

func corruptNode(name string, err error) storeFinding {
	p := Problem{Kind: KindCorrupt, Key: nodeKey(name), Node: name,
		Detail: fmt.Sprintf("node object %s cannot be decoded: %v", name, err)}
	return storeFinding{Problem: p, look: func(ctx context.Context, s store.Store) (bool, error) {
		_, err := s.GetNode(ctx, name)
		if errors.Is(err, store.ErrCorrupt) {
			return true, nil
		}
		return false, ignoreGone(err)
	}}
}

// readNamedPools reads, one by one, the pools the claims and blocks name
// when ListPools failed.
func (v *view) readNamedPools(ctx context.Context, s store.Store) error {
	names := map[string]bool{}
	for ref := range v.claims {
		names[ref.Pool] = true
	}
	for _, n := range v.nodes {
		for _, b := range n.Blocks {
			names[b.Pool] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		p, err := s.GetPool(ctx, name)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case errors.Is(err, store.ErrCorrupt):
			v.badPool[name] = true
			v.corrupt = append(v.corrupt, storeFinding{Problem: Problem{Kind: KindCorrupt, Key: poolKey(name), Pool: name,
				Detail: fmt.Sprintf("pool %s cannot be decoded: %v", name, err)}})
		case err != nil:
			return fmt.Errorf("consistency: read pool %q: %w", name, err)
		default:
			v.pools[name] = p
		}
	}
	return nil
}

func (v *view) counts() Counts {
	c := Counts{Pools: len(v.pools), Claims: v.nclaims, Nodes: len(v.nodes)}
	for _, n := range v.nodes {
		c.Blocks += len(n.Blocks)
		c.Handles += len(n.Handles)
		for _, b := range n.Blocks {
			c.Allocated += len(b.Owners)
		}
	}
	return c
}

func poolKey(name string) string { return "pool/" + name }
func nodeKey(name string) string { return "node/" + name }
func claimKey(ref store.BlockRef) string {
	return "claim/" + ref.Pool + "/" + ref.CIDR.String()
}

// ignoreGone turns the errors of an object that changed or went away
// between looks into "not confirmed".
func ignoreGone(err error) error {
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrCorrupt) {
		return nil
	}
	return err
}
