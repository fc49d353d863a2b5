package consistency

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// storeDetector finds the problems of one view of the typed store. Each
// object decoded, so it is consistent on its own (store.Node.Validate:
// free queues and records cover every block exactly once); what is
// checked here is how objects agree with each other: blocks and claims,
// loans and lenders' records, pools, and addresses held twice.
type storeDetector struct {
	v     *view
	names []string // readable node objects, sorted
	// holders lists the node objects holding each block.
	holders map[store.BlockRef][]string
	// spans lists every block held, by pool, sorted by address.
	spans map[string][]span
	out   []storeFinding
}

type span struct {
	cidr netip.Prefix
	node string
}

func detectStore(v *view) []storeFinding {
	d := &storeDetector{v: v, names: slices.Sorted(maps.Keys(v.nodes)), holders: map[store.BlockRef][]string{}, spans: map[string][]span{}}
	d.out = append(d.out, v.corrupt...)
	for _, name := range d.names {
		for _, b := range v.nodes[name].Blocks {
			ref := store.BlockRef{Pool: b.Pool, CIDR: b.CIDR}
			d.holders[ref] = append(d.holders[ref], name)
			d.spans[b.Pool] = append(d.spans[b.Pool], span{b.CIDR, name})
		}
	}
	for _, ss := range d.spans {
		slices.SortFunc(ss, func(a, b span) int {
			return cmp.Or(a.cidr.Addr().Compare(b.cidr.Addr()), cmp.Compare(a.cidr.Bits(), b.cidr.Bits()), cmp.Compare(a.node, b.node))
		})
	}
	d.pools()
	d.overlaps()
	for _, name := range d.names {
		d.blocks(v.nodes[name])
	}
	d.claims()
	for _, name := range d.names {
		d.loans(v.nodes[name])
		d.lent(v.nodes[name])
	}
	d.addresses()
	return d.out
}

func (d *storeDetector) add(f storeFinding) { d.out = append(d.out, f) }

// pools reports pools an interrupted `pool rm` left marked.
func (d *storeDetector) pools() {
	for _, name := range slices.Sorted(maps.Keys(d.v.pools)) {
		if !d.v.pools[name].Spec.Deleting {
			continue
		}
		d.add(storeFinding{Problem: Problem{Kind: KindPoolDeleting, Key: poolKey(name), Pool: name,
			Detail: allocator.RemovalAdvice(name) + "; it hands out no new addresses meanwhile"},
			look: func(ctx context.Context, s store.Store) (bool, error) {
				p, err := s.GetPool(ctx, name)
				return err == nil && p.Spec.Deleting, ignoreGone(err)
			}})
	}
}

// overlaps reports blocks held by two node objects, and blocks of one pool
// whose CIDRs overlap.
func (d *storeDetector) overlaps() {
	for _, pool := range slices.Sorted(maps.Keys(d.spans)) {
		ss := d.spans[pool]
		cover := 0
		for i := 1; i < len(ss); i++ {
			a, b := ss[cover], ss[i]
			if !a.cidr.Contains(b.cidr.Addr()) {
				cover = i
				continue
			}
			p := Problem{Kind: KindDuplicateBlock, Key: nodeKey(b.node), Pool: pool, Block: a.cidr.String(), Node: a.node + "," + b.node}
			if a.cidr == b.cidr {
				p.Detail = fmt.Sprintf("block %s of pool %s is held by node objects %s and %s: both may hold or hand out its addresses; which one is live cannot be told from the store (its claim names %s)",
					a.cidr, pool, a.node, b.node, d.claimHolder(store.BlockRef{Pool: pool, CIDR: a.cidr}))
			} else {
				p.Detail = fmt.Sprintf("blocks %s (node object %s) and %s (node object %s) of pool %s overlap: their common addresses may be handed out twice",
					a.cidr, a.node, b.cidr, b.node, pool)
			}
			ra, rb := store.BlockRef{Pool: pool, CIDR: a.cidr}, store.BlockRef{Pool: pool, CIDR: b.cidr}
			d.add(storeFinding{Problem: p, look: func(ctx context.Context, s store.Store) (bool, error) {
				var na, nb store.Node
				return sandwich(ctx, nodeReader(s, a.node, &na, holdsBlock(ra)), func(ctx context.Context) (bool, error) {
					_, ok, err := nodeReader(s, b.node, &nb, holdsBlock(rb))(ctx)
					return ok, err
				})
			}})
		}
	}
}

func (d *storeDetector) claimHolder(ref store.BlockRef) string {
	if c, ok := d.v.claims[ref]; ok {
		return "node " + c.Node
	}
	return "no node"
}

func holdsBlock(ref store.BlockRef) func(store.Node) bool {
	return func(n store.Node) bool { _, ok := n.Block(ref); return ok }
}

// blocks checks each block of a node object against its pool and claim.
func (d *storeDetector) blocks(n store.Node) {
	for _, b := range n.Blocks {
		ref := store.BlockRef{Pool: b.Pool, CIDR: b.CIDR}
		base := Problem{Key: nodeKey(n.Name), Pool: b.Pool, Block: b.CIDR.String(), Node: n.Name}
		if _, exists, known := d.v.pool(b.Pool); known && !exists {
			p := base
			p.Kind = KindBlockWithoutPool
			p.Detail = fmt.Sprintf("node object %s holds block %s (%d addresses in use) of pool %s, which does not exist", n.Name, b.CIDR, b.InUse(), b.Pool)
			d.add(storeFinding{Problem: p, look: d.lookBlockPool(n.Name, ref)})
		}
		c, claimed := d.v.claims[ref]
		switch {
		case !claimed && !d.v.claimsBlind(b.Pool):
			p := base
			p.Kind = KindBlockWithoutClaim
			p.Detail = fmt.Sprintf("node object %s holds block %s of pool %s (%d addresses in use), which no claim names: another node could claim it", n.Name, b.CIDR, b.Pool, b.InUse())
			f := storeFinding{Problem: p}
			var held store.Node
			f.look = func(ctx context.Context, s store.Store) (bool, error) {
				return sandwich(ctx, nodeReader(s, n.Name, &held, holdsBlock(ref)), func(ctx context.Context) (bool, error) {
					_, err := s.GetClaim(ctx, ref)
					if errors.Is(err, store.ErrNotFound) {
						return true, nil
					}
					return false, err
				})
			}
			if len(d.holders[ref]) == 1 && !d.overlappedBy(ref) {
				f.fix = func(ctx context.Context, s store.Store) ([]Action, error) {
					if _, err := s.CreateClaim(ctx, store.Claim{BlockRef: ref, Node: n.Name}); err != nil {
						return nil, err
					}
					return []Action{act(p, "created the claim of block "+ref.String()+" for node "+n.Name)}, nil
				}
			}
			d.add(f)
		case claimed && c.Node != n.Name:
			p := base
			p.Kind = KindClaimMismatch
			p.Detail = fmt.Sprintf("node object %s holds block %s of pool %s (%d addresses in use), but its claim names node %s: node %s hands out none of its addresses (its ADDs fail naming the block); if it was written into the object with node %s's credentials, treat them as compromised; delete the pods of the node that must not hold it, then run check again",
				n.Name, b.CIDR, b.Pool, b.InUse(), c.Node, n.Name, n.Name)
			f := storeFinding{Problem: p}
			var held store.Node
			f.look = func(ctx context.Context, s store.Store) (bool, error) {
				return sandwich(ctx, nodeReader(s, n.Name, &held, holdsBlock(ref)), func(ctx context.Context) (bool, error) {
					c, err := s.GetClaim(ctx, ref)
					return err == nil && c.Node != n.Name, err
				})
			}
			if b.InUse() == 0 {
				f.fix = func(ctx context.Context, s store.Store) ([]Action, error) {
					return dropForeignBlock(ctx, s, p, held, ref)
				}
			}
			d.add(f)
		}
	}
}

// lookBlockPool confirms that node object name holds block ref of a pool
// that does not exist.
func (d *storeDetector) lookBlockPool(name string, ref store.BlockRef) func(context.Context, store.Store) (bool, error) {
	return func(ctx context.Context, s store.Store) (bool, error) {
		var n store.Node
		return sandwich(ctx, nodeReader(s, name, &n, holdsBlock(ref)), poolAbsent(s, ref.Pool))
	}
}

func poolAbsent(s store.Store, name string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		_, err := s.GetPool(ctx, name)
		if errors.Is(err, store.ErrNotFound) {
			return true, nil
		}
		return false, err
	}
}

// overlapped reports whether some node object holds a block of ref's pool
// overlapping ref.
func (d *storeDetector) overlapped(ref store.BlockRef) bool {
	return slices.ContainsFunc(d.spans[ref.Pool], func(s span) bool { return s.cidr.Overlaps(ref.CIDR) })
}

// overlappedBy reports whether a block of ref's pool other than ref
// overlaps it.
func (d *storeDetector) overlappedBy(ref store.BlockRef) bool {
	return slices.ContainsFunc(d.spans[ref.Pool], func(s span) bool { return s.cidr != ref.CIDR && s.cidr.Overlaps(ref.CIDR) })
}

// claims checks each claim against its pool and its node's object.
func (d *storeDetector) claims() {
	refs := slices.SortedFunc(maps.Keys(d.v.claims), store.BlockRef.Compare)
	for _, ref := range refs {
		c := d.v.claims[ref]
		base := Problem{Key: claimKey(ref), Pool: ref.Pool, Block: ref.CIDR.String(), Node: c.Node}
		pool, exists, known := d.v.pool(ref.Pool)
		if known && !exists {
			p := base
			p.Kind = KindBlockWithoutPool
			p.Detail = fmt.Sprintf("node %s claims block %s of pool %s, which does not exist", c.Node, ref.CIDR, ref.Pool)
			d.add(storeFinding{Problem: p, look: func(ctx context.Context, s store.Store) (bool, error) {
				return sandwich(ctx, claimReader(s, ref, nil, func(store.Claim) bool { return true }), poolAbsent(s, ref.Pool))
			}})
		}
		if d.v.badNode[c.Node] {
			continue // its object cannot be read: reported as corrupt
		}
		if _, ok := d.v.nodes[c.Node].Block(ref); ok {
			continue
		}
		p := base
		p.Kind = KindClaimWithoutBlock
		p.Detail = fmt.Sprintf("node %s claims block %s of pool %s, but its node object does not hold it (an ADD stopped after claiming it; the node's next ADD adopts it)", c.Node, ref.CIDR, ref.Pool)
		var why string
		switch {
		case !known || !exists:
			why = "its pool cannot be read or does not exist"
		case pool.Spec.Deleting:
			why = "its pool is being removed: 'ipkeeperctl pool rm " + ref.Pool + "' finishes it"
		case ref.CIDR.Bits() != pool.Spec.BlockSize || !pool.Spec.CIDR.Contains(ref.CIDR.Addr()):
			why = fmt.Sprintf("pool %s (%s, blocks /%d) has no such block", ref.Pool, pool.Spec.CIDR, pool.Spec.BlockSize)
		case len(d.holders[ref]) > 0 || d.overlapped(ref):
			why = "another node object holds it or an overlapping block"
		case !d.v.nodesComplete || len(d.v.badNode) > 0:
			why = "some node object cannot be read, and it may hold the block"
		}
		f := storeFinding{Problem: p}
		var claim store.Claim
		var n store.Node
		f.look = func(ctx context.Context, s store.Store) (bool, error) {
			return sandwich(ctx, claimReader(s, ref, &claim, func(cl store.Claim) bool { return cl.Node == c.Node }),
				func(ctx context.Context) (bool, error) {
					_, ok, err := nodeReader(s, c.Node, &n, func(n store.Node) bool { return !holdsBlock(ref)(n) })(ctx)
					return ok, err
				})
		}
		if why == "" {
			f.fix = func(ctx context.Context, s store.Store) ([]Action, error) { return adoptClaim(ctx, s, p, claim, n) }
		} else {
			f.Detail += "; not repaired: " + why
		}
		d.add(f)
	}
}

// claimReader returns a reader of the claim of ref for sandwich, keeping
// it in *into when into is not nil.
func claimReader(s store.Store, ref store.BlockRef, into *store.Claim, holds func(store.Claim) bool) func(context.Context) (store.Version, bool, error) {
	return func(ctx context.Context) (store.Version, bool, error) {
		c, err := s.GetClaim(ctx, ref)
		if err != nil {
			return "", false, err
		}
		if into != nil {
			*into = c
		}
		return c.Version, holds(c), nil
	}
}

// loans checks that every loan of a node object names a lender holding a
// record of the handle for that node.
func (d *storeDetector) loans(n store.Node) {
	for _, l := range n.Loans {
		if d.v.badNode[l.Lender] {
			continue
		}
		if lentRecord(d.v.nodes[l.Lender], l.Handle, n.Name) {
			continue
		}
		p := Problem{Kind: KindLoanWithoutRecord, Key: nodeKey(n.Name), Handle: l.Handle, Node: n.Name,
			Detail: fmt.Sprintf("node object %s says handle %q holds an address in node object %s, which has no record of it for node %s (an ADD or DEL stopped between its writes)", n.Name, l.Handle, l.Lender, n.Name)}
		var borrower, lender store.Node
		loan := l
		d.add(storeFinding{Problem: p,
			look: func(ctx context.Context, s store.Store) (bool, error) {
				return sandwich(ctx, nodeReader(s, n.Name, &borrower, func(b store.Node) bool { return hasLoan(b, loan) }),
					func(ctx context.Context) (bool, error) {
						_, ok, err := nodeReader(s, loan.Lender, &lender, func(ln store.Node) bool { return !lentRecord(ln, loan.Handle, n.Name) })(ctx)
						return ok, err
					})
			},
			fix: func(ctx context.Context, s store.Store) ([]Action, error) {
				return dropLoan(ctx, s, p, borrower, lender, loan)
			}})
	}
}

// lent checks that every record a node object holds for another node is
// named by a loan of that node.
func (d *storeDetector) lent(n store.Node) {
	for _, h := range n.Handles {
		if h.Node == n.Name || d.v.badNode[h.Node] {
			continue
		}
		loan := store.Loan{Handle: h.ID, Lender: n.Name}
		if hasLoan(d.v.nodes[h.Node], loan) {
			continue
		}
		p := Problem{Kind: KindRecordWithoutLoan, Key: nodeKey(n.Name), Handle: h.ID, Node: h.Node,
			Addr: addrString(firstAddr(h.IPs)), Pool: firstPool(h.IPs),
			Detail: fmt.Sprintf("node object %s holds a record of handle %q of node %s, whose object has no loan naming %s: its DEL would not free it", n.Name, h.ID, h.Node, n.Name)}
		f := storeFinding{Problem: p}
		var borrower, lender store.Node
		borrowerName := h.Node
		f.look = func(ctx context.Context, s store.Store) (bool, error) {
			return sandwich(ctx, nodeReader(s, n.Name, &lender, func(ln store.Node) bool { return lentRecord(ln, loan.Handle, borrowerName) }),
				func(ctx context.Context) (bool, error) {
					_, ok, err := nodeReader(s, borrowerName, &borrower, func(b store.Node) bool { return !hasLoan(b, loan) })(ctx)
					return ok, err
				})
		}
		if store.ValidName("node", h.Node) == nil {
			f.fix = func(ctx context.Context, s store.Store) ([]Action, error) { return addLoan(ctx, s, p, borrower, loan) }
		}
		d.add(f)
	}
}

// addresses reports addresses of one pool held by records in two blocks.
func (d *storeDetector) addresses() {
	type holder struct{ node, handle string }
	type at struct {
		pool string
		addr netip.Addr
	}
	held := map[at][]holder{}
	for _, name := range d.names {
		for _, h := range d.v.nodes[name].Handles {
			for _, ip := range h.IPs {
				held[at{ip.Pool, ip.Addr}] = append(held[at{ip.Pool, ip.Addr}], holder{name, h.ID})
			}
		}
	}
	keys := slices.SortedFunc(maps.Keys(held), func(a, b at) int { return cmp.Or(cmp.Compare(a.pool, b.pool), a.addr.Compare(b.addr)) })
	for _, k := range keys {
		hs := held[k]
		if len(hs) < 2 {
			continue
		}
		var nodes, ids []string
		for _, h := range hs {
			nodes = append(nodes, h.node)
			ids = append(ids, h.handle)
		}
		p := Problem{Kind: KindDuplicate, Key: nodeKey(hs[0].node), Pool: k.pool, Addr: k.addr.String(),
			Handle: strings.Join(ids, ","), Node: strings.Join(nodes, ","),
			Detail: fmt.Sprintf("%s of pool %s is held by handles %s (node objects %s); which one is live cannot be told from the store: delete the pods that must not have it",
				k.addr, k.pool, strings.Join(ids, ", "), strings.Join(nodes, ", "))}
		holds := func(h holder) func(store.Node) bool {
			return func(n store.Node) bool {
				r, ok := n.Handle(h.handle)
				return ok && slices.ContainsFunc(r.IPs, func(ip ipam.HandleIP) bool { return ip.Pool == k.pool && ip.Addr == k.addr })
			}
		}
		d.add(storeFinding{Problem: p, look: func(ctx context.Context, s store.Store) (bool, error) {
			var first store.Node
			return sandwich(ctx, nodeReader(s, hs[0].node, &first, holds(hs[0])), func(ctx context.Context) (bool, error) {
				for _, h := range hs[1:] {
					var n store.Node
					if _, ok, err := nodeReader(s, h.node, &n, holds(h))(ctx); err != nil || !ok {
						return false, err
					}
				}
				return true, nil
			})
		}})
	}
}
