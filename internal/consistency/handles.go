package consistency

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// handle checks that every address a handle lists is given to it by its
// block.
func (d *detector) handle(r *handleRec) {
	h := r.h
	if len(h.IPs) == 0 {
		if d.named[h.ID] {
			return // a block gives it an address: reported by owners()
		}
		p := Problem{Kind: KindEmptyHandle, Key: r.key, Handle: h.ID, Node: h.Node,
			Detail: fmt.Sprintf("handle %q lists no address", h.ID)}
		f := finding{Problem: p, keys: []string{r.key}}
		if !d.blind {
			f.fix = func(m *model) []Action {
				m.deleteHandle(h.ID)
				return []Action{act(p, "deleted handle "+h.ID)}
			}
		}
		d.add(f)
		return
	}
	for _, ip := range h.IPs {
		d.handleIP(r, ip)
	}
}

func (d *detector) handleIP(r *handleRec, ip ipam.HandleIP) {
	id := r.h.ID
	p := Problem{Kind: KindHandleAddr, Key: r.key, Pool: ip.Pool, Block: prefixString(ip.Block),
		Addr: addrString(ip.Addr), Handle: id, Node: r.h.Node}
	drop := func(p Problem, keys ...string) finding {
		return finding{Problem: p, keys: append([]string{r.key}, keys...), fix: func(m *model) []Action {
			m.handleDrop(id, ip.Pool, ip.Addr)
			return []Action{act(p, "dropped "+p.Addr+" from handle "+id)}
		}}
	}
	pk := allocator.PoolKey(ip.Pool)
	pr := d.s.pools[ip.Pool]
	bk := allocator.BlockKey(ip.Pool, ip.Block)
	if !ip.Block.IsValid() || !ip.Block.Contains(ip.Addr) || ip.Block != ip.Block.Masked() {
		p.Detail = fmt.Sprintf("handle %q lists %s in block %s, which cannot hold it", id, p.Addr, p.Block)
		if pr != nil && pr.pool.CIDR.Contains(ip.Addr) {
			// Release finds addresses through the block a handle names:
			// name the right one.
			want, _ := ip.Addr.Prefix(pr.pool.BlockSize)
			d.add(finding{Problem: p, keys: []string{r.key, pk}, fix: func(m *model) []Action {
				m.handleSetBlock(id, ip.Pool, ip.Addr, want)
				return []Action{act(p, fmt.Sprintf("set the block of %s in handle %s to %s", p.Addr, id, want))}
			}})
			return
		}
		d.add(drop(p, pk))
		return
	}
	br := d.s.blocks[bk]
	if br != nil && br.unknown {
		return
	}
	c := claim{ip.Pool, ip.Addr}
	listed := d.listed[c]
	if br == nil {
		switch {
		case pr == nil:
			p.Detail = fmt.Sprintf("handle %q lists %s in pool %s, which does not exist", id, p.Addr, ip.Pool)
			d.add(drop(p, pk, bk))
		case !pr.pool.CIDR.Contains(ip.Addr) || ip.Block.Bits() != pr.pool.BlockSize:
			p.Detail = fmt.Sprintf("handle %q lists %s in block %s, which pool %s (%s, blocks /%d) does not have", id, p.Addr, ip.Block, ip.Pool, pr.pool.CIDR, pr.pool.BlockSize)
			d.add(drop(p, pk, bk))
		case len(listed) > 1:
			d.ambiguousClaim(p, bk, listed, "block "+ip.Block.String()+" does not exist")
		default:
			p.Detail = fmt.Sprintf("handle %q lists %s, but its block %s does not exist", id, p.Addr, ip.Block)
			pool, node := pr.pool, r.h.Node
			keys := []string{r.key, bk, pk}
			if node != "" {
				keys = append(keys, allocator.AffinityKey(node, ip.Pool, ip.Block))
			}
			d.add(finding{Problem: p, keys: keys, fix: func(m *model) []Action {
				b := m.ensureBlock(bk, pool, ip.Block, node)
				ord, _ := b.Ordinal(ip.Addr)
				m.take(bk, ord, id)
				return []Action{act(p, fmt.Sprintf("recreated block %s (%s) with %s allocated to %s", ip.Block, nodeName(node), p.Addr, id))}
			}})
		}
		return
	}
	ord := ordinal(br.cidr, ip.Addr)
	owner, held := br.block.Owners[ord]
	if held && owner == id {
		return
	}
	if !held {
		if len(listed) > 1 {
			d.ambiguousClaim(p, bk, listed, "its block gives it to nobody")
			return
		}
		p.Detail = fmt.Sprintf("handle %q lists %s, which its block %s gives to nobody", id, p.Addr, ip.Block)
		d.add(finding{Problem: p, keys: []string{r.key, bk}, fix: func(m *model) []Action {
			m.take(bk, ord, id)
			return []Action{act(p, "allocated "+p.Addr+" to "+id+" in its block")}
		}})
		return
	}
	p.Kind = KindDuplicate
	or := d.s.handles[owner]
	switch {
	case or != nil && or.unknown:
		return
	case or != nil && owner != "":
		p.Detail = fmt.Sprintf("%s is allocated to %q by its block and also listed by handle %q", p.Addr, owner, id)
		d.add(drop(p, bk, or.key))
	case len(listed) == 1:
		p.Detail = fmt.Sprintf("%s is allocated by its block to %q, which has no handle record, and listed by handle %q", p.Addr, owner, id)
		keys := []string{r.key, bk}
		if owner != "" {
			keys = append(keys, allocator.HandleKey(owner))
		}
		d.add(finding{Problem: p, keys: keys, fix: func(m *model) []Action {
			m.take(bk, ord, id)
			return []Action{act(p, fmt.Sprintf("gave %s to handle %s in its block (was %q)", p.Addr, id, owner))}
		}})
	default:
		d.ambiguousClaim(p, bk, listed, fmt.Sprintf("its block gives it to %q, which has no handle record", owner))
	}
}

// ambiguousClaim reports, once per address, an address several handles
// list while its block gives it to none of them.
func (d *detector) ambiguousClaim(p Problem, bk string, listed []string, why string) {
	k := bk + " " + p.Addr
	if d.ambiguous[k] {
		return
	}
	d.ambiguous[k] = true
	p.Kind = KindDuplicate
	p.Handle = strings.Join(listed, ",")
	p.Detail = fmt.Sprintf("%s is listed by handles %s and %s; which one is live cannot be told from the datastore: delete the pods that must not have it (their CNI DEL drops their handles)",
		p.Addr, strings.Join(listed, ", "), why)
	d.add(finding{Problem: p})
}

// handleSetBlock corrects the block a handle names for addr.
func (m *model) handleSetBlock(id, pool string, addr netip.Addr, block netip.Prefix) {
	h := m.handle(id)
	if h == nil {
		return
	}
	for i := range h.IPs {
		if h.IPs[i].Pool == pool && h.IPs[i].Addr == addr {
			h.IPs[i].Block = block
		}
	}
	m.dirty[allocator.HandleKey(id)] = true
}
