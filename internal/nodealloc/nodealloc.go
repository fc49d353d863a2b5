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
	return n.PutBlock(ipam.NewBlock(p, cidr, n.Name))
}

// RemoveBlock returns n without block ref, which must hold no address.
func RemoveBlock(n store.Node, ref store.BlockRef) (store.Node, error) {
	b, ok := n.Block(ref)
	if !ok {
		return n, fmt.Errorf("%w: %s", ErrNotHeld, ref)
	}
	if u := b.InUse(); u > 0 {
		return n, fmt.Errorf("%w: block %s holds %d addresses", ErrTaken, ref, u)
	}
	return n.DropBlock(ref), nil
}

// Take gives handle h the first address pool p permits in n's blocks of
// p, in block order, and returns n with h's record holding it. The record
// keeps h's attributes; h.IPs already held in n are kept.
func Take(n store.Node, p ipam.Pool, h ipam.Handle) (store.Node, ipam.HandleIP, error) {
	c, ip, err := Assign(n, p, h.ID)
	if err != nil {
		return n, ip, err
	}
	return withIP(c, h, ip), ip, nil
}

// Assign is Take without the record: it gives handle id the first
// address pool p permits in n's blocks of p and returns n with the block
// changed. The object is valid again once Record gives id's record the
// address. A caller taking several addresses for one handle (a dual-stack
// ADD) assigns each and records the handle once: changing a record costs
// a copy of the records, adding one does not.
func Assign(n store.Node, p ipam.Pool, id string) (store.Node, ipam.HandleIP, error) {
	for _, cidr := range BlocksOf(n, p.Name) {
		ref := store.BlockRef{Pool: p.Name, CIDR: cidr}
		cur, _ := n.Block(ref)
		if len(cur.Free) == 0 {
			continue // full: no error to make
		}
		b, addr, err := cur.Assign(p, id)
		if errors.Is(err, ipam.ErrBlockFull) {
			continue
		}
		if err != nil {
			return n, ipam.HandleIP{}, err
		}
		return n.PutBlock(b), ipam.HandleIP{Addr: addr, Pool: p.Name, Block: cidr}, nil
	}
	return n, ipam.HandleIP{}, fmt.Errorf("%w: pool %q on node %q", ErrNoRoom, p.Name, n.Name)
}

// TakeAddr gives handle h the address addr of pool p, which must be free
// in a block n holds, and returns n with h's record holding it.
func TakeAddr(n store.Node, p ipam.Pool, addr netip.Addr, h ipam.Handle) (store.Node, ipam.HandleIP, error) {
	c, ip, err := AssignAddr(n, p, addr, h.ID)
	if err != nil {
		return n, ip, err
	}
	return withIP(c, h, ip), ip, nil
}

// AssignAddr is TakeAddr without the record (see Assign).
func AssignAddr(n store.Node, p ipam.Pool, addr netip.Addr, id string) (store.Node, ipam.HandleIP, error) {
	for _, cidr := range BlocksOf(n, p.Name) {
		if !cidr.Contains(addr) {
			continue
		}
		cur, _ := n.Block(store.BlockRef{Pool: p.Name, CIDR: cidr})
		b, err := cur.AssignAddr(p, addr, id)
		if err != nil {
			return n, ipam.HandleIP{}, fmt.Errorf("%w: %w", ErrTaken, err)
		}
		return n.PutBlock(b), ipam.HandleIP{Addr: addr, Pool: p.Name, Block: cidr}, nil
	}
	return n, ipam.HandleIP{}, fmt.Errorf("%w: %s of pool %q on node %q", ErrNotHeld, addr, p.Name, n.Name)
}

// Record returns n with h's record holding the addresses Assign and
// AssignAddr gave h in n (ips, in the order taken) after those its
// record already holds; h's attributes are kept for a new record.
func Record(n store.Node, h ipam.Handle, ips []ipam.HandleIP) store.Node {
	if len(ips) == 0 {
		return n
	}
	if r, ok := n.Handle(h.ID); ok {
		r.IPs = append(slices.Clip(r.IPs), ips...)
		return n.ReplaceRecord(h.ID, r)
	}
	h.IPs = slices.Clone(ips)
	return n.PutRecord(h)
}

// Release frees every address handle id holds in n and drops its record.
// It returns n unchanged and nil when n holds no record of id.
func Release(n store.Node, id string) (store.Node, []ipam.HandleIP) {
	r, ok := n.Handle(id)
	if !ok {
		return n, nil
	}
	c := n
	for _, ip := range r.IPs {
		cur, _ := c.Block(store.BlockRef{Pool: ip.Pool, CIDR: ip.Block})
		b, err := cur.Release(ip.Addr, id)
		if err != nil {
			// A record and its block's owners always agree in an object
			// that passed store.Node.Validate.
			panic(fmt.Sprintf("nodealloc: release %s of %q: %v", ip.Addr, id, err))
		}
		c = c.PutBlock(b)
	}
	return c.DropRecord(id), r.IPs
}

// ReleaseAddr frees one address of handle id in n: it goes to the back of
// its block's free queue and leaves the record, which is dropped when it
// held nothing else. It returns ErrNotHeld when id does not hold addr in n.
func ReleaseAddr(n store.Node, id string, addr netip.Addr) (store.Node, error) {
	r, ok := n.Handle(id)
	if !ok {
		return n, fmt.Errorf("%w: no record of %q in node object %q", ErrNotHeld, id, n.Name)
	}
	k := slices.IndexFunc(r.IPs, func(ip ipam.HandleIP) bool { return ip.Addr == addr })
	if k < 0 {
		return n, fmt.Errorf("%w: %q holds no %s in node object %q", ErrNotHeld, id, addr, n.Name)
	}
	ip := r.IPs[k]
	cur, _ := n.Block(store.BlockRef{Pool: ip.Pool, CIDR: ip.Block})
	b, err := cur.Release(addr, id)
	if err != nil {
		panic(fmt.Sprintf("nodealloc: release %s of %q: %v", addr, id, err))
	}
	c := n.PutBlock(b)
	r.IPs = slices.Delete(slices.Clone(r.IPs), k, k+1)
	if len(r.IPs) == 0 {
		return c.DropRecord(id), nil
	}
	return c.ReplaceRecord(id, r), nil
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
	next.IPs = h.IPs
	c := n
	for _, ip := range next.IPs {
		b, _ := c.Block(store.BlockRef{Pool: ip.Pool, CIDR: ip.Block})
		ord, _ := b.Ordinal(ip.Addr)
		b.Owners = maps.Clone(b.Owners)
		b.Owners[ord] = next.ID
		c = c.PutBlock(b)
	}
	return c.ReplaceRecord(observed.ID, next), nil
}

// withIP returns n with ip added to h's record, creating the record from
// h when n has none.
func withIP(n store.Node, h ipam.Handle, ip ipam.HandleIP) store.Node {
	return Record(n, h, []ipam.HandleIP{ip})
}
