package ipam

import "fmt"

// Validate reports the first reason the block cannot be used: a CIDR that
// is not a masked prefix of at most 2^MaxBlockHostBits addresses, an
// ordinal outside the block (in the free queue or the owners), an ordinal
// twice in the free queue, both free and allocated, or in neither, or an
// allocation to an empty handle name. A block that passes hands out only
// its own addresses, each to one handle at a time.
//
// The allocator validates every block it decodes, from the store or from a
// hint, and refuses one that fails (its problems are what `ipkeeperctl
// check` reports and repairs): acting on it could give an address twice or
// one outside the block. Validate is linear in the block's size.
func (b Block) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: block %s of pool %q: %s", ErrInvalidBlock, b.CIDR, b.Pool, fmt.Sprintf(format, args...))
	}
	if !b.CIDR.IsValid() || b.CIDR != b.CIDR.Masked() {
		return bad("CIDR is not a masked prefix")
	}
	if hostBits(b.CIDR) > MaxBlockHostBits {
		return bad("more than 2^%d addresses", MaxBlockHostBits)
	}
	size := b.Size()
	if len(b.Free)+len(b.Owners) != size {
		return bad("%d free and %d allocated addresses, want %d in all", len(b.Free), len(b.Owners), size)
	}
	seen := make([]bool, size)
	for _, ord := range b.Free {
		switch {
		case ord < 0 || ord >= size:
			return bad("free ordinal %d outside its %d addresses", ord, size)
		case seen[ord]:
			return bad("ordinal %d twice in the free queue", ord)
		}
		seen[ord] = true
	}
	for ord, h := range b.Owners {
		switch {
		case ord < 0 || ord >= size:
			return bad("allocated ordinal %d outside its %d addresses", ord, size)
		case seen[ord]:
			return bad("%s both free and allocated to %q", b.Addr(ord), h)
		case h == "":
			return bad("%s allocated to an empty handle name", b.Addr(ord))
		}
		seen[ord] = true
	}
	// len(Free)+len(Owners) == size and no ordinal was seen twice, so every
	// ordinal was seen exactly once.
	return nil
}
