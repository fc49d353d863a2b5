package ipam

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
)

// Block is a slice of a pool that one node claims (its affinity) and
// allocates from. Addresses are numbered by ordinal from the block's first
// address.
type Block struct {
	// CIDR is the block's prefix.
	CIDR netip.Prefix `json:"cidr"`
	// Pool names the pool the block was cut from.
	Pool string `json:"pool"`
	// Node is the node the block is affine to; empty when none.
	Node string `json:"node,omitempty"`
	// Owners maps the ordinal of every allocated address to its handle ID.
	Owners map[int]string `json:"owners,omitempty"`
	// Free is the FIFO queue of unallocated ordinals: allocation takes the
	// first one the pool permits, release appends at the back.
	Free []int `json:"free"`
}

// NewBlock returns an empty block of pool p at prefix cidr, affine to node.
func NewBlock(p Pool, cidr netip.Prefix, node string) Block {
	n := 1 << uint(hostBits(cidr))
	free := make([]int, n)
	for i := range free {
		free[i] = i
	}
	return Block{CIDR: cidr, Pool: p.Name, Node: node, Free: free}
}

// Size is the number of addresses in the block.
func (b Block) Size() int { return 1 << uint(hostBits(b.CIDR)) }

// Addr returns the address at ordinal ord.
func (b Block) Addr(ord int) netip.Addr { return addOffset(b.CIDR.Addr(), uint64(ord)) }

// Ordinal returns the ordinal of a in the block.
func (b Block) Ordinal(a netip.Addr) (int, error) {
	if !b.CIDR.Contains(a) {
		return 0, fmt.Errorf("%w: %s not in %s", ErrNotInBlock, a, b.CIDR)
	}
	return int(offsetOf(b.CIDR.Addr(), a)), nil
}

// Owner returns the handle holding a, or "" when a is free.
func (b Block) Owner(a netip.Addr) string {
	ord, err := b.Ordinal(a)
	if err != nil {
		return ""
	}
	return b.Owners[ord]
}

// InUse is the number of allocated addresses.
func (b Block) InUse() int { return len(b.Owners) }

// FreeCount is the number of addresses the pool still permits handing out.
func (b Block) FreeCount(p Pool) int {
	n := 0
	for _, ord := range b.Free {
		if p.Permits(b.Addr(ord)) {
			n++
		}
	}
	return n
}

// clone returns a deep copy so that operations never change their input.
func (b Block) clone() Block {
	c := b
	c.Owners = maps.Clone(b.Owners)
	if c.Owners == nil {
		c.Owners = map[int]string{}
	}
	c.Free = slices.Clone(b.Free)
	return c
}

// Assign hands the first free address permitted by p to handle. It returns
// the new block and the address, or ErrBlockFull.
func (b Block) Assign(p Pool, handle string) (Block, netip.Addr, error) {
	for i, ord := range b.Free {
		a := b.Addr(ord)
		if !p.Permits(a) {
			continue
		}
		c := b.clone()
		c.Free = slices.Delete(c.Free, i, i+1)
		c.Owners[ord] = handle
		return c, a, nil
	}
	return b, netip.Addr{}, fmt.Errorf("%w: %s", ErrBlockFull, b.CIDR)
}

// AssignAddr hands the specific address a to handle, or fails with
// ErrUnavailable when a is taken or not permitted by p.
func (b Block) AssignAddr(p Pool, a netip.Addr, handle string) (Block, error) {
	ord, err := b.Ordinal(a)
	if err != nil {
		return b, err
	}
	if !p.Permits(a) {
		return b, fmt.Errorf("%w: %s is reserved in pool %q", ErrUnavailable, a, p.Name)
	}
	i := slices.Index(b.Free, ord)
	if i < 0 {
		return b, fmt.Errorf("%w: %s is held by %s", ErrUnavailable, a, b.Owners[ord])
	}
	c := b.clone()
	c.Free = slices.Delete(c.Free, i, i+1)
	c.Owners[ord] = handle
	return c, nil
}

// Release frees a if handle holds it; the address goes to the back of the
// free queue. It fails with ErrNotOwner otherwise.
func (b Block) Release(a netip.Addr, handle string) (Block, error) {
	ord, err := b.Ordinal(a)
	if err != nil {
		return b, err
	}
	owner, ok := b.Owners[ord]
	if !ok || owner != handle {
		return b, fmt.Errorf("%w: %s held by %q, not %q", ErrNotOwner, a, owner, handle)
	}
	c := b.clone()
	delete(c.Owners, ord)
	c.Free = append(c.Free, ord)
	return c, nil
}

// Allocations returns the allocated addresses in address order with their
// handles.
func (b Block) Allocations() []Allocation {
	out := make([]Allocation, 0, len(b.Owners))
	for _, ord := range slices.Sorted(maps.Keys(b.Owners)) {
		out = append(out, Allocation{Addr: b.Addr(ord), Handle: b.Owners[ord]})
	}
	return out
}

// Allocation is one allocated address and the handle that holds it.
type Allocation struct {
	Addr   netip.Addr `json:"addr"`
	Handle string     `json:"handle"`
}

// Check reports internal inconsistencies of the block: ordinals both free
// and allocated, out of range, duplicated in the free queue, or missing
// from both.
func (b Block) Check() []string {
	var probs []string
	seen := make(map[int]bool, b.Size())
	for _, ord := range b.Free {
		switch {
		case ord < 0 || ord >= b.Size():
			probs = append(probs, fmt.Sprintf("free ordinal %d out of range", ord))
		case seen[ord]:
			probs = append(probs, fmt.Sprintf("ordinal %d (%s) twice in the free queue", ord, b.Addr(ord)))
		case b.Owners[ord] != "":
			probs = append(probs, fmt.Sprintf("%s both free and held by %s", b.Addr(ord), b.Owners[ord]))
		}
		seen[ord] = true
	}
	for ord, h := range b.Owners {
		switch {
		case ord < 0 || ord >= b.Size():
			probs = append(probs, fmt.Sprintf("allocated ordinal %d out of range", ord))
		case h == "":
			probs = append(probs, fmt.Sprintf("%s allocated to an empty handle", b.Addr(ord)))
		}
		seen[ord] = true
	}
	for ord := range b.Size() {
		if !seen[ord] {
			probs = append(probs, fmt.Sprintf("%s neither free nor allocated", b.Addr(ord)))
		}
	}
	slices.Sort(probs)
	return probs
}
