// Package nodealloc is the pure core of allocation on node objects
// (store.Node, docs/STORAGE.md): taking and freeing addresses in the blocks
// one object holds, keeping its handle records and its blocks' owners in
// step, so that the object a caller then writes with one compare-and-swap
// always passes store.Node.Validate. No I/O, no context: an object in, the
// changed object out (the caller's copy is never touched).
package nodealloc

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// Errors, wrapped with the address, block or handle they concern.
var (
	// ErrNoRoom: none of the object's blocks of the pool has a free
	// address the pool permits.
	ErrNoRoom = errors.New("no free address in the node's blocks")
	// ErrNotHeld: the object does not hold the block an address is in.
	ErrNotHeld = errors.New("block not held by this node object")
	// ErrTaken: the address is held by another handle or reserved.
	ErrTaken = errors.New("address not available")
	// ErrChanged: a record is not what the caller observed.
	ErrChanged = errors.New("handle record changed since it was observed")
)

// Clone returns a copy of n whose lists can be changed — elements
// replaced, added, removed — without touching n. The blocks and records
// themselves are shared: everything in this package replaces a block or
// a record (ipam.Block's methods return changed copies) and never changes
// one in place, so a copy costs the lists, not their contents.
func Clone(n store.Node) store.Node {
	c := n
	c.Blocks = slices.Clone(n.Blocks)
	c.Handles = slices.Clone(n.Handles)
	c.Loans = slices.Clone(n.Loans)
	return c
}

// BlocksOf returns the CIDRs of n's blocks of pool, in address order: the
// order allocation tries them in.
func BlocksOf(n store.Node, pool string) []netip.Prefix {
	var out []netip.Prefix
	for _, b := range n.Blocks {
		if b.Pool == pool {
			out = append(out, b.CIDR)
		}
	}
	slices.SortFunc(out, func(x, y netip.Prefix) int { return x.Addr().Compare(y.Addr()) })
	return out
}

// AddBlock returns n holding a new, empty block cidr of pool p (the node
// has claimed it). Adding a block n already holds changes nothing.
func AddBlock(n store.Node, p ipam.Pool, cidr netip.Prefix) store.Node {
	if _, ok := n.Block(store.BlockRef{Pool: p.Name, CIDR: cidr}); ok {
		return n
	}
	c := Clone(n)
	c.Blocks = append(c.Blocks, ipam.NewBlock(p, cidr, n.Name))
	return c
}

// RemoveBlock returns n without block ref, which must hold no address.
func RemoveBlock(n store.Node, ref store.BlockRef) (store.Node, error) {
	i := slices.IndexFunc(n.Blocks, func(b ipam.Block) bool { return b.Pool == ref.Pool && b.CIDR == ref.CIDR })
	if i < 0 {
		return n, fmt.Errorf("%w: %s", ErrNotHeld, ref)
	}
	if u := n.Blocks[i].InUse(); u > 0 {
		return n, fmt.Errorf("%w: block %s holds %d addresses", ErrTaken, ref, u)
	}
	c := Clone(n)
	c.Blocks = slices.Delete(c.Blocks, i, i+1)
	return c, nil
}

// Take gives handle h the first address pool p permits in n's blocks of
// p, in block order, and returns n with h's record holding it. The record
// keeps h's attributes; h.IPs already held in n are kept.
func Take(n store.Node, p ipam.Pool, h ipam.Handle) (store.Node, ipam.HandleIP, error) {
	for _, cidr := range BlocksOf(n, p.Name) {
		i := blockIndex(n, store.BlockRef{Pool: p.Name, CIDR: cidr})
		b, addr, err := n.Blocks[i].Assign(p, h.ID)
		if errors.Is(err, ipam.ErrBlockFull) {
			continue
		}
		if err != nil {
			return n, ipam.HandleIP{}, err
		}
		ip := ipam.HandleIP{Addr: addr, Pool: p.Name, Block: cidr}
		c := Clone(n)
		c.Blocks[i] = b
		return withIP(c, h, ip), ip, nil
	}
	return n, ipam.HandleIP{}, fmt.Errorf("%w: pool %q on node %q", ErrNoRoom, p.Name, n.Name)
}

// TakeAddr gives handle h the address addr of pool p, which must be free
// in a block n holds, and returns n with h's record holding it.
func TakeAddr(n store.Node, p ipam.Pool, addr netip.Addr, h ipam.Handle) (store.Node, ipam.HandleIP, error) {
	for _, cidr := range BlocksOf(n, p.Name) {
		if !cidr.Contains(addr) {
			continue
		}
		i := blockIndex(n, store.BlockRef{Pool: p.Name, CIDR: cidr})
		b, err := n.Blocks[i].AssignAddr(p, addr, h.ID)
		if err != nil {
			return n, ipam.HandleIP{}, fmt.Errorf("%w: %w", ErrTaken, err)
		}
		ip := ipam.HandleIP{Addr: addr, Pool: p.Name, Block: cidr}
		c := Clone(n)
		c.Blocks[i] = b
		return withIP(c, h, ip), ip, nil
	}
	return n, ipam.HandleIP{}, fmt.Errorf("%w: %s of pool %q on node %q", ErrNotHeld, addr, p.Name, n.Name)
}

// Release frees every address handle id holds in n and drops its record.
// It returns n unchanged and nil when n holds no record of id.
func Release(n store.Node, id string) (store.Node, []ipam.HandleIP) {
	i := slices.IndexFunc(n.Handles, func(h ipam.Handle) bool { return h.ID == id })
	if i < 0 {
		return n, nil
	}
	c := Clone(n)
	freed := c.Handles[i].IPs
	for _, ip := range freed {
		j := blockIndex(c, store.BlockRef{Pool: ip.Pool, CIDR: ip.Block})
		b, err := c.Blocks[j].Release(ip.Addr, id)
		if err != nil {
			// A record and its block's owners always agree in an object
			// that passed store.Node.Validate.
			panic(fmt.Sprintf("nodealloc: release %s of %q: %v", ip.Addr, id, err))
		}
		c.Blocks[j] = b
	}
	c.Handles = slices.Delete(c.Handles, i, i+1)
	return c, freed
}

// ReleaseAddr frees one address of handle id in n: it goes to the back of
// its block's free queue and leaves the record, which is dropped when it
// held nothing else. It returns ErrNotHeld when id does not hold addr in n.
func ReleaseAddr(n store.Node, id string, addr netip.Addr) (store.Node, error) {
	i := slices.IndexFunc(n.Handles, func(h ipam.Handle) bool { return h.ID == id })
	if i < 0 {
		return n, fmt.Errorf("%w: no record of %q in node object %q", ErrNotHeld, id, n.Name)
	}
	k := slices.IndexFunc(n.Handles[i].IPs, func(ip ipam.HandleIP) bool { return ip.Addr == addr })
	if k < 0 {
		return n, fmt.Errorf("%w: %q holds no %s in node object %q", ErrNotHeld, id, addr, n.Name)
	}
	c := Clone(n)
	ip := c.Handles[i].IPs[k]
	j := blockIndex(c, store.BlockRef{Pool: ip.Pool, CIDR: ip.Block})
	b, err := c.Blocks[j].Release(addr, id)
	if err != nil {
		panic(fmt.Sprintf("nodealloc: release %s of %q: %v", addr, id, err))
	}
	c.Blocks[j] = b
	c.Handles[i].IPs = slices.Delete(slices.Clone(c.Handles[i].IPs), k, k+1)
	if len(c.Handles[i].IPs) == 0 {
		c.Handles = slices.Delete(c.Handles, i, i+1)
	}
	return c, nil
}

// ReleaseObserved is Release guarded by what the caller observed: it
// frees the record only when n still holds it exactly as observed (same
// attachment, container, creation time and addresses), so that a handle
// released and allocated again since it was observed is never freed. It
// returns ErrChanged otherwise, and n unchanged when there is no record.
func ReleaseObserved(n store.Node, observed ipam.Handle) (store.Node, []ipam.HandleIP, error) {
	h, ok := n.Handle(observed.ID)
	if !ok {
		return n, nil, nil
	}
	if !Same(h, observed) {
		return n, nil, fmt.Errorf("%w: %q on node object %q", ErrChanged, observed.ID, n.Name)
	}
	c, freed := Release(n, observed.ID)
	return c, freed, nil
}

// Same reports whether two records are one allocation in one state: same
// handle, container, pod, creation time, addresses, sticky identity and
// parking.
func Same(a, b ipam.Handle) bool {
	return a.ID == b.ID && a.ContainerID == b.ContainerID && a.Node == b.Node && a.PodUID == b.PodUID &&
		a.Created.Equal(b.Created) && slices.Equal(a.IPs, b.IPs) && a.Sticky == b.Sticky && a.Parked.Equal(b.Parked)
}

// Rename moves the record of handle old, as observed, to handle next: its
// addresses now belong to next, whose attributes replace the old ones (a
// new sandbox of the same pod taking over its predecessor's address). It
// returns ErrChanged when the record is not as observed, ErrNotHeld when
// there is none, and ErrTaken when next already has a record in n.
func Rename(n store.Node, observed ipam.Handle, next ipam.Handle) (store.Node, error) {
	h, ok := n.Handle(observed.ID)
	switch {
	case !ok:
		return n, fmt.Errorf("%w: no record of %q in node object %q", ErrNotHeld, observed.ID, n.Name)
	case !Same(h, observed):
		return n, fmt.Errorf("%w: %q on node object %q", ErrChanged, observed.ID, n.Name)
	}
	if _, dup := n.Handle(next.ID); dup {
		return n, fmt.Errorf("%w: %q already has a record in node object %q", ErrTaken, next.ID, n.Name)
	}
	c := Clone(n)
	i := slices.IndexFunc(c.Handles, func(h ipam.Handle) bool { return h.ID == observed.ID })
	next.IPs = c.Handles[i].IPs
	c.Handles[i] = next
	for _, ip := range next.IPs {
		b := &c.Blocks[blockIndex(c, store.BlockRef{Pool: ip.Pool, CIDR: ip.Block})]
		ord, _ := b.Ordinal(ip.Addr)
		b.Owners = maps.Clone(b.Owners)
		b.Owners[ord] = next.ID
	}
	return c, nil
}

// withIP returns c (already a copy) with ip added to h's record, creating
// the record from h when c has none.
func withIP(c store.Node, h ipam.Handle, ip ipam.HandleIP) store.Node {
	if i := slices.IndexFunc(c.Handles, func(r ipam.Handle) bool { return r.ID == h.ID }); i >= 0 {
		c.Handles[i].IPs = append(slices.Clip(c.Handles[i].IPs), ip)
		return c
	}
	h.IPs = []ipam.HandleIP{ip}
	c.Handles = append(c.Handles, h)
	return c
}

func blockIndex(n store.Node, ref store.BlockRef) int {
	return slices.IndexFunc(n.Blocks, func(b ipam.Block) bool { return b.Pool == ref.Pool && b.CIDR == ref.CIDR })
}
