package webui

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// Address states in a block's map (one character per address) and in its
// address list.
const (
	stateFree     = "free"     // '.'
	stateUsed     = "used"     // 'u': held by a handle of the block's node
	stateBorrowed = "borrowed" // 'b': held by a handle of another node
	stateOrphan   = "orphan"   // 'o': held by a handle ID with no handle
	stateReserved = "reserved" // 'r': never handed out (reason says why)
	stateLeak     = "leak"     // 'l': a leak candidate, held or not
)

var stateChar = map[string]byte{stateFree: '.', stateUsed: 'u', stateBorrowed: 'b', stateOrphan: 'o',
	stateReserved: 'r', stateLeak: 'l'}

// errNotFound is a lookup that found nothing (HTTP 404).
var errNotFound = errors.New("not found")

// blockDetail is GET /api/blocks/{cidr}.
type blockDetail struct {
	Revision   int64        `json:"revision"`
	Generation uint64       `json:"generation"`
	Pool       string       `json:"pool"`
	CIDR       netip.Prefix `json:"cidr"`
	Claimed    bool         `json:"claimed"`
	Node       string       `json:"node,omitempty"`
	Color      string       `json:"color"`
	Size       int          `json:"size"`
	InUse      int          `json:"inUse"`
	Reserved   int          `json:"reserved"`
	Borrowed   int          `json:"borrowed"`
	Leaks      int          `json:"leaks"`
	Orphans    int          `json:"orphans"`
	// Map has one character per address, in order: '.' free, 'u' used,
	// 'b' borrowed, 'o' orphan, 'r' reserved, 'l' leak candidate.
	Map string `json:"map"`
	// Addresses lists every address that is not free.
	Addresses []addrView `json:"addresses"`
}

type addrView struct {
	Addr        netip.Addr     `json:"addr"`
	Ordinal     int            `json:"ordinal"`
	State       string         `json:"state"`
	Reason      string         `json:"reason,omitempty"`
	Handle      string         `json:"handle,omitempty"`
	Pod         string         `json:"pod,omitempty"`
	Namespace   string         `json:"namespace,omitempty"`
	Node        string         `json:"node,omitempty"`
	ContainerID string         `json:"containerID,omitempty"`
	IfName      string         `json:"ifname,omitempty"`
	Since       *time.Time     `json:"since,omitempty"`
	Leak        *LeakCandidate `json:"leak,omitempty"`
	// Sticky is the identity the address stays reserved for; Parked is
	// when its pod went away (absent while one holds it).
	Sticky string     `json:"sticky,omitempty"`
	Parked *time.Time `json:"parked,omitempty"`
}

// parseBlockRef reads a block reference from a URL path: "10.0.0.0/26",
// "10.0.0.0-26" (the datastore's spelling) or a bare address.
func parseBlockRef(s string) (netip.Prefix, bool, error) {
	s = strings.TrimSpace(s)
	orig := s
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.PrefixFrom(a.WithZone(""), a.BitLen()), true, nil
	}
	if i := strings.LastIndexByte(s, '-'); i > 0 && !strings.Contains(s, "/") {
		s = s[:i] + "/" + s[i+1:]
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, false, fmt.Errorf("%q is not a block (CIDR such as 10.0.0.0/26) or an address", orig)
	}
	return p, false, nil
}

// blockDetail renders the block at ref (a block CIDR, or an address when
// bare) of pool (any pool holding it when ""). m.mu must be held for
// reading.
func (m *model) blockDetail(ref netip.Prefix, bare bool, pool string) (blockDetail, error) {
	var ps *poolState
	for _, p := range m.pools {
		if (pool == "" || p.pool.Name == pool) && p.pool.CIDR.Contains(ref.Addr()) {
			if ps == nil || p.pool.Name < ps.pool.Name {
				ps = p
			}
		}
	}
	var bs *blockState
	var cidr netip.Prefix
	if ps != nil {
		cidr, _ = ref.Addr().Prefix(ps.pool.BlockSize)
		if !bare && ref != cidr {
			return blockDetail{}, fmt.Errorf("%s is not a block of pool %q (its blocks are /%d: %s)", ref, ps.pool.Name, ps.pool.BlockSize, cidr)
		}
		bs = m.blocks[store.BlockRef{Pool: ps.pool.Name, CIDR: cidr}]
	} else {
		// A block of a pool whose definition is gone.
		for _, b := range m.blocks {
			if (pool == "" || b.b.Pool == pool) && (b.b.CIDR == ref || bare && b.b.CIDR.Contains(ref.Addr())) {
				bs, cidr = b, b.b.CIDR
				break
			}
		}
		if bs == nil {
			return blockDetail{}, fmt.Errorf("%w: no pool holds %s", errNotFound, ref)
		}
	}
	d := blockDetail{Revision: m.rev, Generation: m.gen, CIDR: cidr, Addresses: []addrView{}}
	var b ipam.Block
	if bs != nil {
		b = bs.b
		d.Claimed, d.Node, d.Pool = true, b.Node, b.Pool
		a := bs.agg
		d.InUse, d.Reserved, d.Borrowed, d.Leaks, d.Orphans = a.inUse, a.reserved, a.borrowed, a.leaks, a.orphans
	} else {
		b = ipam.Block{CIDR: cidr, Pool: ps.pool.Name}
		d.Pool = ps.pool.Name
	}
	d.Color = nodeColor(d.Node)
	d.Size = b.Size()
	var pp *ipam.Pool
	if ps != nil {
		pp = &ps.pool
	}
	mp := make([]byte, d.Size)
	reserved, leaks := 0, 0
	for ord := range d.Size {
		av := m.addrState(b, pp, ord)
		mp[ord] = stateChar[av.State]
		if av.Reason != "" && av.State == stateReserved {
			reserved++
		}
		if av.Leak != nil {
			leaks++
		}
		if av.State != stateFree {
			d.Addresses = append(d.Addresses, av)
		}
	}
	d.Map = string(mp)
	if !d.Claimed {
		d.Reserved, d.Leaks = reserved, leaks
	}
	return d, nil
}

// addrState describes ordinal ord of block b of pool p (nil when gone).
func (m *model) addrState(b ipam.Block, p *ipam.Pool, ord int) addrView {
	addr := b.Addr(ord)
	av := addrView{Addr: addr, Ordinal: ord, State: stateFree}
	if p != nil && !p.Permits(addr) {
		av.State, av.Reason = stateReserved, reserveReason(*p, addr)
	}
	if id, held := b.Owners[ord]; held {
		av.Handle = id
		if h := m.handles[id]; h != nil {
			av.State = stateUsed
			if h.node != "" && b.Node != "" && h.node != b.Node {
				av.State = stateBorrowed
			}
			av.Pod, av.Namespace, av.Node = h.rec().Pod, h.rec().Namespace, h.node
			av.ContainerID, av.IfName = h.rec().ContainerID, h.rec().IfName
			if !h.rec().Created.IsZero() {
				t := h.rec().Created.UTC()
				av.Since = &t
			}
			av.Sticky = h.rec().Sticky
			if !h.rec().Parked.IsZero() {
				t := h.rec().Parked.UTC()
				av.Parked = &t
			}
		} else {
			av.State = stateOrphan
		}
	}
	if l, ok := m.leaks[addr]; ok {
		av.State, av.Leak = stateLeak, &l
		if av.Handle == "" {
			av.Handle = l.Handle
		}
	}
	return av
}

// reserveReason says why pool p does not hand out a, which it does not
// permit; the checks follow ipam.Pool.Permits.
func reserveReason(p ipam.Pool, a netip.Addr) string {
	hb := p.CIDR.Addr().BitLen() - p.CIDR.Bits()
	switch {
	case !p.CIDR.Contains(a):
		return "outside pool"
	case a == p.CIDR.Addr() && hb > 1:
		return "network"
	case a.Is4() && hb > 1 && a == ipam.LastAddr(p.CIDR):
		return "broadcast"
	case a == p.Gateway:
		return "gateway"
	case p.RangeStart.IsValid() && a.Less(p.RangeStart), p.RangeEnd.IsValid() && p.RangeEnd.Less(a):
		return "outside range"
	}
	for _, x := range p.Exclude {
		if x.Contains(a) {
			return "excluded " + x.String()
		}
	}
	return "reserved"
}
