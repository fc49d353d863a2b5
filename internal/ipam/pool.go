package ipam

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Default block sizes (prefix lengths) when a pool does not set one.
const (
	DefaultBlockSizeV4 = 26
	DefaultBlockSizeV6 = 122
	// MaxBlockHostBits bounds a block to 65536 addresses so that one block
	// stays a small datastore value.
	MaxBlockHostBits = 16
	// maxBlockIndexBits bounds how many blocks a pool may be cut into.
	maxBlockIndexBits = 62
)

// BlockSizeFor is the block size of a pool at cidr: the explicit size for
// its family when set (v4 or v6, 0 meaning unset), else the family's
// default clamped to cidr, so that a small range is one block. An explicit
// size larger than cidr is returned as is; Validate rejects it.
func BlockSizeFor(cidr netip.Prefix, v4, v6 int) int {
	explicit, def := v4, DefaultBlockSizeV4
	if cidr.Addr().Is6() {
		explicit, def = v6, DefaultBlockSizeV6
	}
	if explicit != 0 {
		return explicit
	}
	return max(def, cidr.Bits())
}

// Pool is a range of addresses cut into equally sized blocks.
type Pool struct {
	// Name identifies the pool; it may not contain '/'.
	Name string `json:"name"`
	// CIDR is the whole address range of the pool, masked.
	CIDR netip.Prefix `json:"cidr"`
	// BlockSize is the prefix length of the pool's blocks.
	BlockSize int `json:"blockSize"`
	// RangeStart and RangeEnd, when set, restrict allocation to
	// [RangeStart, RangeEnd] inside CIDR.
	RangeStart netip.Addr `json:"rangeStart,omitzero"`
	RangeEnd   netip.Addr `json:"rangeEnd,omitzero"`
	// Gateway is returned with every address and never handed out.
	Gateway netip.Addr `json:"gateway,omitzero"`
	// Exclude lists ranges inside CIDR that are never handed out.
	Exclude []netip.Prefix `json:"exclude,omitempty"`
	// NodeSelector is a Kubernetes label selector; empty selects every node.
	NodeSelector string `json:"nodeSelector,omitempty"`
	// Disabled pools hand out nothing new; existing allocations stay.
	Disabled bool `json:"disabled,omitempty"`
	// Deleting marks a pool being removed: it hands out nothing new.
	Deleting bool `json:"deleting,omitempty"`
	// StrictAffinity forbids borrowing addresses from other nodes' blocks.
	StrictAffinity bool `json:"strictAffinity,omitempty"`
	// Sticky keeps the addresses of every StatefulSet pod and KubeVirt
	// virtual machine that draws from the pool for its identity when its
	// pod goes away (as ipam.sticky does for a network); a pod's or its
	// namespace's ipkeeper.io/sticky annotation still decides first.
	Sticky bool `json:"sticky,omitempty"`
	// Origin says who defined the pool: "config", "cli" or "import".
	Origin string `json:"origin,omitempty"`
	// Reserved lists the pool's reservations (store.Reservation), masked:
	// never handed out, like Exclude, but stored apart from the
	// definition and changed at runtime. Datastores fill it when they
	// read the pool; it is never part of the pool's own encoding.
	Reserved []netip.Prefix `json:"-"`
}

// Is6 reports whether the pool holds IPv6 addresses.
func (p Pool) Is6() bool { return p.CIDR.Addr().Is6() }

// Validate checks the pool definition and returns an error wrapping
// ErrInvalidPool that names the offending field.
func (p Pool) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: pool %q: %s", ErrInvalidPool, p.Name, fmt.Sprintf(format, args...))
	}
	if p.Name == "" || strings.ContainsAny(p.Name, "/\x00") {
		return fmt.Errorf("%w: pool name %q must be non-empty and contain no '/'", ErrInvalidPool, p.Name)
	}
	if !p.CIDR.IsValid() {
		return bad("cidr is not set")
	}
	if p.CIDR != p.CIDR.Masked() {
		return bad("cidr %s has host bits set (want %s)", p.CIDR, p.CIDR.Masked())
	}
	if p.CIDR.Addr().Is4In6() || p.CIDR.Addr().Zone() != "" {
		return bad("cidr %s must be plain IPv4 or IPv6", p.CIDR)
	}
	bitLen := p.CIDR.Addr().BitLen()
	if p.BlockSize < 1 || p.BlockSize > bitLen {
		return bad("block size /%d is not a valid prefix length for %s", p.BlockSize, p.CIDR)
	}
	if p.BlockSize < p.CIDR.Bits() {
		return bad("pool %s is smaller than its block size /%d: use a block size of /%d or longer", p.CIDR, p.BlockSize, p.CIDR.Bits())
	}
	if bitLen-p.BlockSize > MaxBlockHostBits {
		return bad("block size /%d is too large: a block holds at most %d addresses (/%d)", p.BlockSize, 1<<MaxBlockHostBits, bitLen-MaxBlockHostBits)
	}
	if p.BlockSize-p.CIDR.Bits() > maxBlockIndexBits {
		return bad("pool %s cut into /%d blocks has more than 2^%d blocks: use a larger block size", p.CIDR, p.BlockSize, maxBlockIndexBits)
	}
	for _, f := range []struct {
		name string
		a    netip.Addr
	}{{"rangeStart", p.RangeStart}, {"rangeEnd", p.RangeEnd}, {"gateway", p.Gateway}} {
		if f.a.IsValid() && !p.CIDR.Contains(f.a) {
			return bad("%s %s is outside %s", f.name, f.a, p.CIDR)
		}
	}
	if p.RangeStart.IsValid() && p.RangeEnd.IsValid() && p.RangeEnd.Less(p.RangeStart) {
		return bad("rangeStart %s is after rangeEnd %s", p.RangeStart, p.RangeEnd)
	}
	for _, x := range p.Exclude {
		if !x.IsValid() || x.Addr().Is4() != p.CIDR.Addr().Is4() {
			return bad("exclude %s is not a prefix of the pool's family", x)
		}
	}
	if !p.hasUsable() {
		return bad("%s has no usable address", p.CIDR)
	}
	return nil
}

// SameDefinition reports whether q defines the same address space as p
// (ignoring name, selector, flags — Disabled, Deleting, StrictAffinity,
// Sticky — and origin): a network config that defines a pool leaves the
// flags an admin set on it alone.
func (p Pool) SameDefinition(q Pool) bool {
	return p.CIDR == q.CIDR && p.BlockSize == q.BlockSize && p.RangeStart == q.RangeStart &&
		p.RangeEnd == q.RangeEnd && p.Gateway == q.Gateway && slices.Equal(p.Exclude, q.Exclude)
}

// Permits reports whether a may be handed out from this pool: inside the
// CIDR and the range, not the network or (IPv4) broadcast address, not the
// gateway, not excluded.
func (p Pool) Permits(a netip.Addr) bool {
	if !p.CIDR.Contains(a) {
		return false
	}
	if a == p.CIDR.Addr() && hostBits(p.CIDR) > 1 {
		return false
	}
	if p.CIDR.Addr().Is4() && hostBits(p.CIDR) > 1 && a == LastAddr(p.CIDR) {
		return false
	}
	if a == p.Gateway {
		return false
	}
	if p.RangeStart.IsValid() && a.Less(p.RangeStart) {
		return false
	}
	if p.RangeEnd.IsValid() && p.RangeEnd.Less(a) {
		return false
	}
	for _, x := range p.Exclude {
		if x.Contains(a) {
			return false
		}
	}
	for _, x := range p.Reserved {
		if x.Contains(a) {
			return false
		}
	}
	return true
}

// NumBlocks returns how many blocks the pool is cut into.
func (p Pool) NumBlocks() uint64 { return 1 << uint(p.BlockSize-p.CIDR.Bits()) }

// BlockAt returns the i-th block prefix of the pool (0 ≤ i < NumBlocks).
func (p Pool) BlockAt(i uint64) netip.Prefix {
	// A block has at most 2^MaxBlockHostBits addresses, so step < 64 and
	// the offset i<<step is at most 128 bits wide.
	step := uint(hostBits(netip.PrefixFrom(p.CIDR.Addr(), p.BlockSize)))
	return netip.PrefixFrom(addOffset128(p.CIDR.Addr(), i>>(64-step), i<<step), p.BlockSize)
}

// BlockIndex returns the index of the block holding a, and whether a is in
// the pool at all.
func (p Pool) BlockIndex(a netip.Addr) (uint64, bool) {
	if !p.CIDR.Contains(a) {
		return 0, false
	}
	blk, _ := a.Prefix(p.BlockSize)
	hi, lo := Diff128(p.CIDR.Addr(), blk.Addr())
	step := uint(p.CIDR.Addr().BitLen() - p.BlockSize)
	return lo>>step | hi<<(64-step), true
}

// PermittedIn counts the addresses of block b that the pool permits.
func (p Pool) PermittedIn(b netip.Prefix) int {
	n := 0
	size := uint64(1) << uint(hostBits(b))
	for i := range size {
		if p.Permits(addOffset(b.Addr(), i)) {
			n++
		}
	}
	return n
}

// Usable counts the addresses the pool can hand out. Pools of more than
// 2^22 addresses are not scanned: the figure is then the range size less
// the excluded prefixes, saturating at the largest uint64.
func (p Pool) Usable() uint64 {
	first, last := p.BlockSpan()
	size := hostBits(netip.PrefixFrom(p.CIDR.Addr(), p.BlockSize))
	if last-first >= (1<<22)>>uint(size) {
		return p.approxUsable()
	}
	var n uint64
	for i := first; i <= last; i++ {
		n += uint64(p.PermittedIn(p.BlockAt(i)))
	}
	return n
}

// hasUsable reports whether any address is permitted, stepping over
// excluded prefixes whole, so it takes a few steps whatever the pool's size.
func (p Pool) hasUsable() bool {
	a, end := p.CIDR.Addr(), LastAddr(p.CIDR)
	if p.RangeStart.IsValid() {
		a = p.RangeStart
	}
	if p.RangeEnd.IsValid() {
		end = p.RangeEnd
	}
	for !end.Less(a) {
		if x, ok := p.excludedBy(a); ok {
			next := LastAddr(x).Next()
			if !next.IsValid() || !p.CIDR.Contains(next) {
				return false
			}
			a = next
			continue
		}
		if p.Permits(a) {
			return true
		}
		if a = a.Next(); !a.IsValid() {
			return false
		}
	}
	return false
}

func (p Pool) excludedBy(a netip.Addr) (netip.Prefix, bool) {
	for _, x := range p.Exclude {
		if x.Contains(a) {
			return x, true
		}
	}
	for _, x := range p.Reserved {
		if x.Contains(a) {
			return x, true
		}
	}
	return netip.Prefix{}, false
}

// BlockSpan returns the indices of the first and last block that overlap
// the pool's range.
func (p Pool) BlockSpan() (first, last uint64) {
	last = p.NumBlocks() - 1
	if p.RangeStart.IsValid() {
		first, _ = p.BlockIndex(p.RangeStart)
	}
	if p.RangeEnd.IsValid() {
		last, _ = p.BlockIndex(p.RangeEnd)
	}
	return first, last
}

func (p Pool) approxUsable() uint64 {
	lo, hi := p.CIDR.Addr(), LastAddr(p.CIDR)
	if p.RangeStart.IsValid() {
		lo = p.RangeStart
	}
	if p.RangeEnd.IsValid() {
		hi = p.RangeEnd
	}
	over, n := Diff128(lo, hi)
	if over != 0 {
		return ^uint64(0)
	}
	for _, x := range p.Exclude {
		if hb := hostBits(x); hb < 64 && n > 1<<uint(hb) {
			n -= 1 << uint(hb)
		}
	}
	return n
}

// overlapsRange reports whether block b intersects [RangeStart, RangeEnd].
func (p Pool) overlapsRange(b netip.Prefix) bool {
	if p.RangeStart.IsValid() && LastAddr(b).Less(p.RangeStart) {
		return false
	}
	if p.RangeEnd.IsValid() && p.RangeEnd.Less(b.Addr()) {
		return false
	}
	return true
}

// HasRoom reports whether block b of the pool could hold any address.
func (p Pool) HasRoom(b netip.Prefix) bool {
	return p.overlapsRange(b) && p.PermittedIn(b) > 0
}
