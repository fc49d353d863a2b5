package webui

import (
	"cmp"
	"math"
	"net/netip"
	"slices"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// Layouts of a pool's blocks on the page.
const (
	// layoutLinear draws every block of the pool at its place.
	layoutLinear = "linear"
	// layoutCompressed draws claimed blocks only, in address order, with
	// the unclaimed stretches between them as gaps sized by their log.
	layoutCompressed = "compressed"
	// maxLinearBlockBits: IPv4 pools of at most 2^16 blocks are linear.
	maxLinearBlockBits = 16
)

// overview is GET /api/pools: every pool with per-block figures.
type overview struct {
	Revision   int64     `json:"revision"`
	Generation uint64    `json:"generation"`
	Loaded     bool      `json:"loaded"`
	Updated    time.Time `json:"updated"`
	// Error is the last failure to read the datastore; the data shown
	// is then what was read before.
	Error string `json:"error,omitempty"`
	// Undecodable counts datastore values the map could not read.
	Undecodable int        `json:"undecodable,omitempty"`
	Pools       []poolView `json:"pools"`
	// Colors maps every node to its colour on the map.
	Colors map[string]string `json:"colors"`
}

type poolView struct {
	Name      string       `json:"name"`
	CIDR      netip.Prefix `json:"cidr"`
	Family    int          `json:"family"`
	BlockSize int          `json:"blockSize"`
	// BlockAddrs is the number of addresses per block; BlockBits the
	// log2 of the number of blocks.
	BlockAddrs int    `json:"blockAddrs"`
	BlockBits  int    `json:"blockBits"`
	NumBlocks  uint64 `json:"numBlocks"`
	Layout     string `json:"layout"`
	// Usable is how many addresses the pool can hand out.
	Usable         uint64         `json:"usable"`
	Claimed        int            `json:"claimed"`
	InUse          int            `json:"inUse"`
	Borrowed       int            `json:"borrowed"`
	Leaks          int            `json:"leaks"`
	Orphans        int            `json:"orphans"`
	Gateway        netip.Addr     `json:"gateway,omitzero"`
	RangeStart     netip.Addr     `json:"rangeStart,omitzero"`
	RangeEnd       netip.Addr     `json:"rangeEnd,omitzero"`
	Exclude        []netip.Prefix `json:"exclude,omitempty"`
	NodeSelector   string         `json:"nodeSelector,omitempty"`
	Disabled       bool           `json:"disabled,omitempty"`
	Deleting       bool           `json:"deleting,omitempty"`
	StrictAffinity bool           `json:"strictAffinity,omitempty"`
	Origin         string         `json:"origin,omitempty"`
	// Missing is set for blocks whose pool definition is gone.
	Missing bool `json:"missing,omitempty"`
	// Reserved are the addresses the pool never hands out, with their
	// place in the pool's address space as fractions (pos, end).
	Reserved []reservedSpan `json:"reserved"`
	Blocks   []blockView    `json:"blocks"`
	// TrailingGap is the number of unclaimed blocks after the last
	// claimed one (compressed layout).
	TrailingGap float64 `json:"trailingGap,omitempty"`
	// NetRate is the net change of the addresses in use per second over
	// ForecastWindow seconds of changes the map saw; ExhaustionSeconds
	// the time until none is free at that rate (as of the last change;
	// absent when the pool is not filling or before a rate is known).
	// RunsOut marks a pool forecast to run out within a day.
	NetRate           float64  `json:"netRate,omitempty"`
	ForecastWindow    float64  `json:"forecastWindowSeconds,omitempty"`
	ExhaustionSeconds *float64 `json:"exhaustionSeconds,omitempty"`
	RunsOut           bool     `json:"runsOut,omitempty"`
}

type reservedSpan struct {
	From   netip.Addr `json:"from"`
	To     netip.Addr `json:"to"`
	Reason string     `json:"reason"`
	Pos    float64    `json:"pos"`
	End    float64    `json:"end"`
}

type blockView struct {
	CIDR  netip.Prefix `json:"cidr"`
	Index uint64       `json:"index"`
	// Gap is the number of unclaimed blocks between the previous claimed
	// block (or the pool's start) and this one.
	Gap      float64 `json:"gap,omitempty"`
	Node     string  `json:"node,omitempty"`
	InUse    int     `json:"inUse"`
	Reserved int     `json:"reserved"`
	Borrowed int     `json:"borrowed,omitempty"`
	Leaks    int     `json:"leaks,omitempty"`
	Orphans  int     `json:"orphans,omitempty"`
}

// nodesView is GET /api/nodes.
type nodesView struct {
	Revision   int64      `json:"revision"`
	Generation uint64     `json:"generation"`
	Nodes      []nodeView `json:"nodes"`
}

type nodeView struct {
	Name  string `json:"name"`
	Color string `json:"color"`
	// Blocks the node claims and the addresses they hold.
	Blocks    int `json:"blocks"`
	Addresses int `json:"addresses"`
	// InUse counts addresses of its blocks that are held (by anyone).
	InUse int `json:"inUse"`
	// Borrowed counts addresses its handles hold in other nodes' blocks;
	// Lent, addresses of its blocks held by other nodes' handles.
	Borrowed int `json:"borrowed"`
	Lent     int `json:"lent"`
	// Handles is the number of attachments made on the node.
	Handles int `json:"handles"`
	Leaks   int `json:"leaks"`
}

// buildOverview renders the model. m.mu must be held for reading.
func (m *model) buildOverview() overview {
	ov := overview{Revision: m.rev, Generation: m.gen, Loaded: m.loaded, Updated: m.updated.UTC(),
		Undecodable: len(m.bad), Colors: map[string]string{}, Pools: []poolView{}}
	if m.status != nil {
		ov.Error = m.status.Error()
	}
	names := map[string]bool{}
	for n := range m.pools {
		names[n] = true
	}
	for n := range m.byPool {
		names[n] = true
	}
	for _, n := range slices.Sorted(mapKeys(names)) {
		ov.Pools = append(ov.Pools, m.poolView(n, ov.Colors))
	}
	for n := range m.podCount {
		if _, ok := ov.Colors[n]; !ok && n != "" {
			ov.Colors[n] = nodeColor(n)
		}
	}
	return ov
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// sortedBlocks returns the pool's blocks in address order.
func (m *model) sortedBlocks(pool string) []*blockState {
	bs := make([]*blockState, 0, len(m.byPool[pool]))
	for _, b := range m.byPool[pool] {
		bs = append(bs, b)
	}
	slices.SortFunc(bs, func(a, b *blockState) int { return a.b.CIDR.Addr().Compare(b.b.CIDR.Addr()) })
	return bs
}

func (m *model) poolView(name string, colors map[string]string) poolView {
	blocks := m.sortedBlocks(name)
	pv := poolView{Name: name, Blocks: make([]blockView, 0, len(blocks)), Reserved: []reservedSpan{}}
	ps := m.pools[name]
	if ps == nil {
		// Blocks of a pool whose definition is gone: show them anyway.
		pv.Missing, pv.Layout = true, layoutCompressed
		if len(blocks) > 0 {
			pv.BlockAddrs, pv.BlockSize = blocks[0].b.Size(), blocks[0].b.CIDR.Bits()
			pv.Family = familyOf(blocks[0].b.CIDR.Addr())
		}
	} else {
		p := ps.pool
		pv.CIDR, pv.Family, pv.BlockSize = p.CIDR, familyOf(p.CIDR.Addr()), p.BlockSize
		pv.BlockAddrs = 1 << uint(p.CIDR.Addr().BitLen()-p.BlockSize)
		pv.BlockBits = p.BlockSize - p.CIDR.Bits()
		pv.NumBlocks = p.NumBlocks()
		pv.Usable = p.Usable()
		pv.Gateway, pv.RangeStart, pv.RangeEnd, pv.Exclude = p.Gateway, p.RangeStart, p.RangeEnd, p.Exclude
		pv.NodeSelector, pv.Disabled, pv.Deleting = p.NodeSelector, p.Disabled, p.Deleting
		pv.StrictAffinity, pv.Origin = p.StrictAffinity, p.Origin
		pv.Layout = layoutCompressed
		if p.CIDR.Addr().Is4() && pv.BlockBits <= maxLinearBlockBits {
			pv.Layout = layoutLinear
		}
		pv.Reserved = reservedSpans(p)
	}
	var next uint64 // the index after the previous claimed block
	for _, bs := range blocks {
		b, a := bs.b, bs.agg
		bv := blockView{CIDR: b.CIDR, Node: b.Node, InUse: a.inUse, Reserved: a.reserved,
			Borrowed: a.borrowed, Leaks: a.leaks, Orphans: a.orphans}
		if ps != nil {
			if idx, ok := ps.pool.BlockIndex(b.CIDR.Addr()); ok {
				bv.Index = idx
				if idx > next {
					bv.Gap = float64(idx - next)
				}
				next = idx + 1
			}
		}
		pv.Blocks = append(pv.Blocks, bv)
		pv.Claimed++
		pv.InUse += a.inUse
		pv.Borrowed += a.borrowed
		pv.Leaks += a.leaks
		pv.Orphans += a.orphans
		if _, ok := colors[b.Node]; !ok && b.Node != "" {
			colors[b.Node] = nodeColor(b.Node)
		}
	}
	if ps != nil && pv.NumBlocks > next {
		pv.TrailingGap = float64(pv.NumBlocks - next)
	}
	m.setForecast(&pv)
	return pv
}

func familyOf(a netip.Addr) int {
	if a.Is4() {
		return 4
	}
	return 6
}

// reservedSpans lists what pool p never hands out: network and broadcast
// addresses, the gateway, what lies outside its range and its excludes.
func reservedSpans(p ipam.Pool) []reservedSpan {
	first, last := p.CIDR.Addr(), ipam.LastAddr(p.CIDR)
	hb := p.CIDR.Addr().BitLen() - p.CIDR.Bits()
	out := []reservedSpan{}
	add := func(from, to netip.Addr, reason string) {
		out = append(out, reservedSpan{From: from, To: to, Reason: reason,
			Pos: fraction(first, from, hb), End: fraction(first, to.Next(), hb)})
	}
	if hb > 1 {
		add(first, first, "network")
		if p.CIDR.Addr().Is4() {
			add(last, last, "broadcast")
		}
	}
	if p.Gateway.IsValid() {
		add(p.Gateway, p.Gateway, "gateway")
	}
	if p.RangeStart.IsValid() && first.Less(p.RangeStart) {
		add(first, p.RangeStart.Prev(), "outside range")
	}
	if p.RangeEnd.IsValid() && p.RangeEnd.Less(last) {
		add(p.RangeEnd.Next(), last, "outside range")
	}
	for _, x := range p.Exclude {
		add(x.Masked().Addr(), ipam.LastAddr(x), "excluded")
	}
	slices.SortStableFunc(out, func(a, b reservedSpan) int { return cmp.Compare(a.Pos, b.Pos) })
	return out
}

// fraction is a's offset from base as a fraction of 2^hostBits; an
// invalid a (the address after the last) is 1.
func fraction(base, a netip.Addr, hostBits int) float64 {
	if !a.IsValid() {
		return 1
	}
	hi, lo := ipam.Diff128(base, a)
	off := float64(hi)*math.Ldexp(1, 64) + float64(lo)
	return min(off/math.Ldexp(1, hostBits), 1)
}

// buildNodes renders the node table. m.mu must be held for reading.
func (m *model) buildNodes() nodesView {
	nodes := map[string]*nodeView{}
	get := func(n string) *nodeView {
		v := nodes[n]
		if v == nil {
			v = &nodeView{Name: n, Color: nodeColor(n)}
			nodes[n] = v
		}
		return v
	}
	for _, bs := range m.blocks {
		if bs.b.Node != "" {
			v := get(bs.b.Node)
			v.Blocks++
			v.Addresses += bs.b.Size()
			v.InUse += bs.agg.inUse
			v.Lent += bs.agg.borrowed
			v.Leaks += bs.agg.leaks
		}
		for n, c := range bs.agg.borrowers {
			get(n).Borrowed += c
		}
	}
	for n, c := range m.podCount {
		if n != "" {
			get(n).Handles = c
		}
	}
	out := nodesView{Revision: m.rev, Generation: m.gen, Nodes: make([]nodeView, 0, len(nodes))}
	for _, n := range slices.Sorted(mapKeys(nodes)) {
		out.Nodes = append(out.Nodes, *nodes[n])
	}
	return out
}
