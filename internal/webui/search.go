package webui

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// maxResults bounds a search's answer.
const maxResults = 50

// searchView is GET /api/search?q=.
type searchView struct {
	Query   string         `json:"query"`
	Results []searchResult `json:"results"`
	// More is set when results were left out.
	More bool `json:"more,omitempty"`
}

// searchResult is one hit; the page jumps to its block (and address).
type searchResult struct {
	// Kind is "address", "block", "pod", "node" or "handle".
	Kind  string       `json:"kind"`
	Label string       `json:"label"`
	Pool  string       `json:"pool,omitempty"`
	Block netip.Prefix `json:"block,omitzero"`
	Addr  netip.Addr   `json:"addr,omitzero"`
	Node  string       `json:"node,omitempty"`
	// rank orders hits: exact before prefix before substring matches;
	// order keeps handle hits in handle ID order within a rank.
	rank, order int
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' || c >= 0x80 {
			return true
		}
	}
	return false
}

// search finds q as an address, a block, or a pod, node, container or
// handle name (case-insensitive; exact matches first). m.mu must be held
// for reading.
func (m *model) search(q string) searchView {
	q = strings.TrimSpace(q)
	out := searchView{Query: q, Results: []searchResult{}}
	if q == "" {
		return out
	}
	if ref, bare, err := parseBlockRef(q); err == nil {
		out.Results = append(out.Results, m.searchPrefix(ref, bare)...)
		return out
	}
	lq := strings.ToLower(q)
	rank := ranker(lq)
	res := m.searchNodes(rank)
	res = m.searchNamed(lq, rank, res)
	sortResults(res)
	if len(res) > maxResults {
		res, out.More = res[:maxResults], true
	}
	out.Results = append(out.Results, res...)
	return out
}

// searchPrefix finds ref in every pool holding it: as an address (bare)
// or as the block holding it.
func (m *model) searchPrefix(ref netip.Prefix, bare bool) []searchResult {
	var out []searchResult
	for _, name := range slices.Sorted(mapKeys(m.pools)) {
		p := m.pools[name].pool
		if !p.CIDR.Contains(ref.Addr()) {
			continue
		}
		blk, _ := ref.Addr().Prefix(p.BlockSize)
		if !bare {
			out = append(out, searchResult{Kind: "block", Label: fmt.Sprintf("block %s of pool %s", blk, name),
				Pool: name, Block: blk, Node: m.blockNode(name, blk)})
			continue
		}
		bs := m.blocks[store.BlockRef{Pool: name, CIDR: blk}]
		label := ref.Addr().String() + " "
		r := searchResult{Kind: "address", Pool: name, Block: blk, Addr: ref.Addr()}
		if bs == nil {
			label += "— free (block " + blk.String() + " is not claimed)"
			if !p.Permits(ref.Addr()) {
				label = ref.Addr().String() + " — reserved: " + reserveReason(p, ref.Addr())
			}
		} else {
			ord, _ := bs.b.Ordinal(ref.Addr())
			av := m.addrState(bs.b, &p, ord)
			r.Node = av.Node
			label += "— " + describe(av)
		}
		r.Label = label
		out = append(out, r)
	}
	return out
}

// ranker returns how a name matches the lower-case query lq: 0 exactly,
// 1 as a prefix, 2 inside, -1 not at all.
func ranker(lq string) func(string) int {
	return func(s string) int {
		// Names are mostly lower case already (Kubernetes names are):
		// fold only when needed, so a search over every handle does not
		// allocate per handle.
		if hasUpper(s) {
			s = strings.ToLower(s)
		}
		switch {
		case s == lq:
			return 0
		case strings.HasPrefix(s, lq):
			return 1
		case strings.Contains(s, lq):
			return 2
		}
		return -1
	}
}

// searchNodes finds the nodes (holding a block or pods) whose names rank:
// each result jumps to the node's first block.
func (m *model) searchNodes(rank func(string) int) []searchResult {
	var res []searchResult
	first := map[string]*blockState{}
	for _, bs := range m.blocks {
		if n := bs.b.Node; n != "" {
			if f := first[n]; f == nil || bs.b.CIDR.Addr().Less(f.b.CIDR.Addr()) {
				first[n] = bs
			}
		}
	}
	nodes := map[string]bool{}
	for n := range first {
		nodes[n] = true
	}
	for n := range m.podCount {
		if n != "" {
			nodes[n] = true
		}
	}
	for n := range nodes {
		r := rank(n)
		if r < 0 {
			continue
		}
		sr := searchResult{Kind: "node", Node: n, rank: r, Label: fmt.Sprintf("node %s", n)}
		if f := first[n]; f != nil {
			sr.Pool, sr.Block = f.b.Pool, f.b.CIDR
			sr.Label += fmt.Sprintf(" — first block %s", f.b.CIDR)
		} else {
			sr.Label += " — claims no block"
		}
		res = append(res, sr)
	}
	return res
}

// searchHit is a handle whose pod, container or handle name ranks.
type searchHit struct {
	rank int
	kind string
	h    *handleState
}

// searchNamed appends to res the pods, containers and handles whose names
// rank: one result per address. Hits are collected cheaply, ordered by
// rank and handle, and only the results returned are labelled; it stops
// past 2*maxResults results (search cuts them to maxResults and tells
// there were more).
func (m *model) searchNamed(lq string, rank func(string) int, res []searchResult) []searchResult {
	var hits []searchHit
	withNS := strings.Contains(lq, "/")
	for h := range m.searchHandles(lq) {
		best, kind := -1, ""
		try := func(k, s string) {
			if s == "" {
				return
			}
			if r := rank(s); r >= 0 && (best < 0 || r < best) {
				best, kind = r, k
			}
		}
		try("pod", h.rec().Pod)
		if withNS && h.rec().Namespace != "" && h.rec().Pod != "" {
			try("pod", h.rec().Namespace+"/"+h.rec().Pod)
		}
		try("handle", h.rec().ContainerID)
		try("handle", h.id)
		if best >= 0 {
			hits = append(hits, searchHit{rank: best, kind: kind, h: h})
		}
	}
	// Every hit adds at least one result: the first 2*maxResults+1 hits
	// are all that can be shown (or tell that more were found).
	hits = smallest(hits, 2*maxResults+1, func(a, b searchHit) int {
		return cmp.Or(cmp.Compare(a.rank, b.rank), cmp.Compare(a.h.id, b.h.id))
	})
	for _, x := range hits {
		if len(res) > 2*maxResults {
			break
		}
		h := x.h
		name := h.rec().Pod
		if h.rec().Namespace != "" && name != "" {
			name = h.rec().Namespace + "/" + h.rec().Pod
		}
		if x.kind == "handle" || name == "" {
			name = "handle " + h.id
		}
		for _, ip := range h.ips {
			res = append(res, searchResult{Kind: x.kind, rank: x.rank, Pool: ip.Pool, Block: ip.Block, Addr: ip.Addr, Node: h.node,
				Label: fmt.Sprintf("%s — %s on %s", name, ip.Addr, nodeOrNone(h.node)), order: len(res)})
		}
	}
	return res
}

// sortResults puts nodes first within a rank (by name), then handles in
// the order found (by handle ID, addresses in the handle's order).
func sortResults(res []searchResult) {
	slices.SortStableFunc(res, func(a, b searchResult) int {
		if c := cmp.Compare(a.rank, b.rank); c != 0 {
			return c
		}
		if (a.Kind == "node") != (b.Kind == "node") {
			if a.Kind == "node" {
				return -1
			}
			return 1
		}
		if a.Kind == "node" {
			return cmp.Compare(a.Node, b.Node)
		}
		return cmp.Compare(a.order, b.order)
	})
}

// smallest returns the k smallest of xs by cmp, sorted (xs itself, sorted,
// when it has at most k): O(n log k), so that a search matching every
// handle does not sort them all.
func smallest[T any](xs []T, k int, cmp func(a, b T) int) []T {
	if len(xs) <= k {
		slices.SortFunc(xs, cmp)
		return xs
	}
	if k <= 0 {
		return xs[:0]
	}
	// A max-heap of the k smallest so far.
	h := slices.Clone(xs[:k])
	down := func(i int) {
		for {
			l, big := 2*i+1, i
			if l < k && cmp(h[l], h[big]) > 0 {
				big = l
			}
			if r := l + 1; r < k && cmp(h[r], h[big]) > 0 {
				big = r
			}
			if big == i {
				return
			}
			h[i], h[big] = h[big], h[i]
			i = big
		}
	}
	for i := k/2 - 1; i >= 0; i-- {
		down(i)
	}
	for _, x := range xs[k:] {
		if cmp(x, h[0]) < 0 {
			h[0] = x
			down(0)
		}
	}
	slices.SortFunc(h, cmp)
	return h
}

func nodeOrNone(n string) string {
	if n == "" {
		return "no node"
	}
	return n
}

func describe(av addrView) string {
	who := av.Pod
	if av.Namespace != "" && who != "" {
		who = av.Namespace + "/" + who
	}
	if who == "" {
		who = "handle " + av.Handle
	}
	switch av.State {
	case stateFree:
		return "free"
	case stateReserved:
		return "reserved: " + av.Reason
	case stateOrphan:
		return "held by handle " + av.Handle + ", which does not exist"
	case stateLeak:
		return "leak candidate: " + av.Leak.Reason
	case stateBorrowed:
		return fmt.Sprintf("%s on %s (borrowed)", who, av.Node)
	}
	return fmt.Sprintf("%s on %s", who, nodeOrNone(av.Node))
}

func (m *model) blockNode(pool string, blk netip.Prefix) string {
	if bs := m.blocks[store.BlockRef{Pool: pool, CIDR: blk}]; bs != nil {
		return bs.b.Node
	}
	return ""
}
