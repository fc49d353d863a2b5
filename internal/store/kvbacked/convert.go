package kvbacked

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// convert computes the typed keys and values equivalent to the
// first-layout keys among es. Blocks are the truth about ownership, as
// they were for the first layout's allocator: an address a block gives to
// a handle stays that handle's (a record is made for a handle that does
// not exist: Report.Orphans); an address a handle lists that its block
// does not give to it is left out (Report.Strays). A handle whose
// addresses sit in blocks of several nodes gets a record in each node's
// object, naming its own node (borrowed addresses). Affinity keys only
// index the blocks' Node and are not read.
func convert(es []kv.KeyValue, rep *Report) (map[string][]byte, error) {
	handles := map[string]ipam.Handle{}
	var blocks []ipam.Block
	for _, e := range es {
		switch {
		case strings.HasPrefix(e.Key, v1BlockPrefix):
			b, err := decodeV1[ipam.Block](e)
			if err != nil {
				return nil, err
			}
			if err := b.Validate(); err != nil {
				return nil, fmt.Errorf("%w: migrate: %s: %v", store.ErrCorrupt, e.Key, err)
			}
			if e.Key != v1BlockPrefix+b.Pool+"/"+blockName(b.CIDR) {
				return nil, fmt.Errorf("%w: migrate: %s holds block %s of pool %q", store.ErrCorrupt, e.Key, b.CIDR, b.Pool)
			}
			blocks = append(blocks, b)
		case strings.HasPrefix(e.Key, v1HandlePrefix):
			h, err := decodeV1[ipam.Handle](e)
			if err != nil {
				return nil, err
			}
			if e.Key != v1HandlePrefix+h.ID {
				return nil, fmt.Errorf("%w: migrate: %s holds handle %q", store.ErrCorrupt, e.Key, h.ID)
			}
			handles[h.ID] = h
		}
	}
	nodes := map[string]*store.Node{}
	records := map[string]map[string]*ipam.Handle{} // node -> handle ID -> record
	owned := map[store.BlockRef]ipam.Block{}
	for _, b := range blocks {
		ref := store.BlockRef{Pool: b.Pool, CIDR: b.CIDR}
		if b.Node == "" {
			if b.InUse() == 0 {
				rep.DroppedBlocks = append(rep.DroppedBlocks, ref.String())
				continue
			}
			rep.UnaffineBlocks = append(rep.UnaffineBlocks, ref.String())
			b.Node = UnaffineNode
		}
		owned[ref] = b
		n := nodes[b.Node]
		if n == nil {
			n = &store.Node{Name: b.Node}
			nodes[b.Node], records[b.Node] = n, map[string]*ipam.Handle{}
		}
		n.Blocks = append(n.Blocks, b)
	}
	// Every handle's listed addresses its block gives it, in its order.
	for _, id := range slices.Sorted(maps.Keys(handles)) {
		h := handles[id]
		for _, ip := range h.IPs {
			b, ok := owned[store.BlockRef{Pool: ip.Pool, CIDR: ip.Block}]
			if !ok || b.Owner(ip.Addr) != id {
				rep.Strays = append(rep.Strays, fmt.Sprintf("%s (handle %s)", ip.Addr, id))
				continue
			}
			r := record(records[b.Node], h, b.Node)
			r.IPs = append(r.IPs, ip)
		}
		if len(h.IPs) == 0 {
			rep.Strays = append(rep.Strays, fmt.Sprintf("handle %s holds no address", id))
		}
	}
	// Addresses blocks give to handles that do not list them (or do not
	// exist) stay theirs.
	for _, ref := range slices.SortedFunc(maps.Keys(owned), store.BlockRef.Compare) {
		b := owned[ref]
		for _, ord := range slices.Sorted(maps.Keys(b.Owners)) {
			id, a := b.Owners[ord], b.Addr(ord)
			h, exists := handles[id]
			if exists && slices.ContainsFunc(h.IPs, func(ip ipam.HandleIP) bool { return ip.Addr == a && ip.Pool == b.Pool && ip.Block == b.CIDR }) {
				continue
			}
			if !exists {
				h = ipam.Handle{ID: id}
				h.Network, h.ContainerID, h.IfName, _ = ipam.ParseHandleID(id)
			}
			rep.Orphans = append(rep.Orphans, fmt.Sprintf("%s (handle %s)", a, id))
			r := record(records[b.Node], h, b.Node)
			r.IPs = append(r.IPs, ipam.HandleIP{Addr: a, Pool: b.Pool, Block: b.CIDR})
		}
	}
	target := map[string][]byte{}
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		n := nodes[name]
		slices.SortFunc(n.Blocks, func(x, y ipam.Block) int {
			return store.BlockRef{Pool: x.Pool, CIDR: x.CIDR}.Compare(store.BlockRef{Pool: y.Pool, CIDR: y.CIDR})
		})
		for _, id := range slices.Sorted(maps.Keys(records[name])) {
			n.Handles = append(n.Handles, *records[name][id])
		}
		val, err := store.MarshalNode(*n)
		if err != nil {
			return nil, fmt.Errorf("%w: migrate: the first layout's blocks of node %q do not make a node object: %w", store.ErrCorrupt, name, err)
		}
		target[nodeKey(name)] = val
		for _, b := range n.Blocks {
			c := store.Claim{BlockRef: store.BlockRef{Pool: b.Pool, CIDR: b.CIDR}, Node: name}
			target[claimKey(c.BlockRef)] = claimValue(c)
			target[nodeClaimKey(name, c.BlockRef)] = claimValue(c)
			rep.Claims++
		}
		for _, borrower := range n.LendsTo() {
			target[lendsKey(borrower, name)] = []byte{}
		}
		rep.Nodes++
		rep.Handles += len(n.Handles)
	}
	return target, nil
}

// record returns the record of h in a node object's records, made (without
// addresses) when missing; a handle of no node is the object's own.
func record(recs map[string]*ipam.Handle, h ipam.Handle, object string) *ipam.Handle {
	if r, ok := recs[h.ID]; ok {
		return r
	}
	r := h
	r.IPs = nil
	r.Node = cmp.Or(h.Node, object)
	recs[h.ID] = &r
	return &r
}
