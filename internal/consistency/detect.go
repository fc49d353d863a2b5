package consistency

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// finding is a problem with what its repair reads and does.
type finding struct {
	Problem
	// keys are the keys the fix reads or writes (the first one is where
	// the problem lives); the fix commits only if none changed.
	keys []string
	// fix applies the repair to the model and says what it did; nil when
	// the problem is reported only.
	fix func(m *model) []Action
}

// claim identifies an address in a pool.
type claim struct {
	pool string
	addr netip.Addr
}

type detector struct {
	s *snapshot
	// listed maps an address to the IDs of the known handles listing it.
	listed map[claim][]string
	// named holds the handle IDs some known block gives an address to.
	named map[string]bool
	// blind is set when some block could not be read: who it gives
	// addresses to is unknown, so handles are not deleted.
	blind bool
	// ambiguous remembers addresses already reported as claimed by
	// several handles.
	ambiguous map[string]bool
	out       []finding
}

// detect finds every problem of the snapshot. Affinity findings come
// first so that their fixes run before fixes that recreate blocks.
func detect(s *snapshot) []finding {
	d := &detector{s: s, listed: map[claim][]string{}, named: map[string]bool{}, ambiguous: map[string]bool{}}
	d.out = append(d.out, s.problems...)
	for _, id := range slices.Sorted(maps.Keys(s.handles)) {
		r := s.handleOf(id)
		if r == nil {
			continue
		}
		for _, ip := range r.h.IPs {
			c := claim{ip.Pool, ip.Addr}
			if !slices.Contains(d.listed[c], id) {
				d.listed[c] = append(d.listed[c], id)
			}
		}
	}
	for _, r := range s.blocks {
		if r.unknown {
			d.blind = true
			continue
		}
		for _, h := range r.block.Owners {
			d.named[h] = true
		}
	}
	for _, key := range s.order {
		if r := s.affs[key]; r != nil {
			d.affinity(r)
		}
	}
	for _, key := range s.order {
		if r := s.blockOf(key); r != nil {
			d.block(r)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(s.handles)) {
		if r := s.handleOf(id); r != nil {
			d.handle(r)
		}
	}
	return d.out
}

func (d *detector) add(f finding) { d.out = append(d.out, f) }

// affinity checks one affinity record against its block.
func (d *detector) affinity(r *affRec) {
	bk := allocator.BlockKey(r.pool, r.cidr)
	br := d.s.blocks[bk]
	p := Problem{Kind: KindOrphanAffinity, Key: r.key, Pool: r.pool, Block: r.cidr.String(), Node: r.node}
	switch {
	case br == nil:
		p.Detail = fmt.Sprintf("node %s has an affinity record for block %s of pool %s, which does not exist", r.node, r.cidr, r.pool)
	case br.unknown || br.block.Node == r.node:
		return
	default:
		p.Detail = fmt.Sprintf("node %s has an affinity record for block %s of pool %s, which is affine to %s", r.node, r.cidr, r.pool, nodeName(br.block.Node))
	}
	d.add(finding{Problem: p, keys: []string{r.key, bk}, fix: func(m *model) []Action {
		m.deleteAff(r.key)
		return []Action{act(p, "deleted affinity record "+r.key)}
	}})
}

func nodeName(n string) string {
	if n == "" {
		return "no node"
	}
	return "node " + n
}

// block checks one block: its pool, its affinity record, its accounting
// and the handles its allocations name.
func (d *detector) block(r *blockRec) {
	b := r.block
	base := Problem{Key: r.key, Pool: r.pool, Block: r.cidr.String()}
	if d.s.pools[r.pool] == nil {
		p := base
		p.Kind = KindBlockWithoutPool
		p.Detail = fmt.Sprintf("block %s belongs to pool %s, which does not exist", r.cidr, r.pool)
		d.add(finding{Problem: p})
	}
	if b.Node != "" {
		ak := allocator.AffinityKey(b.Node, r.pool, r.cidr)
		if d.s.affs[ak] == nil {
			p := base
			p.Kind, p.Node = KindMissingAffinity, b.Node
			p.Detail = fmt.Sprintf("block %s is affine to node %s, which has no affinity record for it", r.cidr, b.Node)
			d.add(finding{Problem: p, keys: []string{r.key, ak}, fix: func(m *model) []Action {
				m.putAff(ak, r.key)
				return []Action{act(p, "wrote affinity record "+ak)}
			}})
		}
	}
	d.accounting(r, base)
	d.owners(r, base)
}

// accounting checks that the free queue and the allocations cover every
// ordinal of the block exactly once.
func (d *detector) accounting(r *blockRec, base Problem) {
	b := r.block
	size := b.Size()
	base.Kind = KindCounts
	normalize := func(p Problem, did string) finding {
		return finding{Problem: p, keys: []string{r.key}, fix: func(m *model) []Action {
			m.normalizeFree(r.key)
			return []Action{act(p, did)}
		}}
	}
	inFree := map[int]int{}
	for _, ord := range b.Free {
		inFree[ord]++
		p := base
		switch owner, held := b.Owners[ord]; {
		case ord < 0 || ord >= size:
			p.Detail = fmt.Sprintf("free queue holds ordinal %d, outside the block's %d addresses", ord, size)
			d.add(normalize(p, fmt.Sprintf("removed ordinal %d from the free queue", ord)))
		case inFree[ord] == 2:
			p.Addr = b.Addr(ord).String()
			p.Detail = fmt.Sprintf("%s is in the free queue more than once, so it could be handed out twice", p.Addr)
			d.add(normalize(p, "removed the repeats of "+p.Addr+" from the free queue"))
		case held && inFree[ord] == 1:
			p.Addr, p.Handle = b.Addr(ord).String(), owner
			p.Detail = fmt.Sprintf("%s is both free and allocated to %q", p.Addr, owner)
			d.add(normalize(p, "removed "+p.Addr+" from the free queue; it stays allocated"))
		}
	}
	for _, ord := range slices.Sorted(maps.Keys(b.Owners)) {
		if ord >= 0 && ord < size {
			continue
		}
		p := base
		p.Handle = b.Owners[ord]
		p.Detail = fmt.Sprintf("allocation entry for ordinal %d is outside the block's %d addresses", ord, size)
		d.add(finding{Problem: p, keys: []string{r.key}, fix: func(m *model) []Action {
			m.dropOwner(r.key, ord)
			return []Action{act(p, fmt.Sprintf("removed the allocation entry for ordinal %d", ord))}
		}})
	}
	for ord := range size {
		if _, held := b.Owners[ord]; held || inFree[ord] > 0 {
			continue
		}
		a := b.Addr(ord)
		p := base
		p.Addr = a.String()
		listed := d.listed[claim{r.pool, a}]
		switch len(listed) {
		case 0:
			p.Detail = fmt.Sprintf("%s is neither free nor allocated, and no handle lists it", a)
			d.add(finding{Problem: p, keys: []string{r.key}, fix: func(m *model) []Action {
				m.appendFree(r.key, ord)
				return []Action{act(p, "put "+p.Addr+" at the back of the free queue")}
			}})
		case 1:
			p.Handle = listed[0]
			p.Detail = fmt.Sprintf("%s is neither free nor allocated; handle %q lists it", a, listed[0])
			d.add(finding{Problem: p, keys: []string{r.key, allocator.HandleKey(listed[0])}, fix: func(m *model) []Action {
				m.take(r.key, ord, listed[0])
				return []Action{act(p, "allocated "+p.Addr+" to "+listed[0])}
			}})
		default:
			p.Detail = fmt.Sprintf("%s is neither free nor allocated; handles %s all list it: delete the pods that must not have it (their CNI DEL drops their handles)", a, strings.Join(listed, ", "))
			d.add(finding{Problem: p})
		}
	}
}

// owners checks that every allocation names a handle that lists it.
func (d *detector) owners(r *blockRec, base Problem) {
	b := r.block
	base.Kind = KindOrphanAddr
	for _, ord := range slices.Sorted(maps.Keys(b.Owners)) {
		if ord < 0 || ord >= b.Size() {
			continue
		}
		owner, a := b.Owners[ord], b.Addr(ord)
		ip := ipam.HandleIP{Addr: a, Pool: r.pool, Block: r.cidr}
		p := base
		p.Addr, p.Handle, p.Node = a.String(), owner, b.Node
		hr := d.s.handles[owner]
		switch {
		case hr != nil && hr.unknown:
			continue
		case owner == "" || hr == nil:
			if len(d.listed[claim{r.pool, a}]) > 0 {
				continue // a handle claims it: reported by handle()
			}
			id := owner
			did := "recreated handle " + owner + " listing " + p.Addr
			if owner == "" {
				id = "repair.unknown." + p.Addr
				did = "gave " + p.Addr + " to new handle " + id
				p.Detail = fmt.Sprintf("%s is allocated to an empty handle name", a)
			} else {
				p.Detail = fmt.Sprintf("%s is allocated to handle %q, which does not exist", a, owner)
			}
			d.add(finding{Problem: p, keys: []string{r.key, allocator.HandleKey(id)}, fix: func(m *model) []Action {
				m.take(r.key, ord, id)
				m.handleAdd(id, ip, b.Node)
				return []Action{act(p, did)}
			}})
		case !lists(hr.h, r.pool, a):
			p.Detail = fmt.Sprintf("%s is allocated to handle %q, which does not list it", a, owner)
			d.add(finding{Problem: p, keys: []string{r.key, hr.key}, fix: func(m *model) []Action {
				m.handleAdd(owner, ip, b.Node)
				return []Action{act(p, "added "+p.Addr+" to handle "+owner)}
			}})
		}
	}
}

func lists(h ipam.Handle, pool string, a netip.Addr) bool {
	return slices.ContainsFunc(h.IPs, func(ip ipam.HandleIP) bool { return ip.Pool == pool && ip.Addr == a })
}

func act(p Problem, did string) Action {
	return Action{Kind: p.Kind, Pool: p.Pool, Block: p.Block, Addr: p.Addr, Handle: p.Handle, Node: p.Node, Did: did}
}
