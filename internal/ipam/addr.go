package ipam

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// addOffset returns a+off, wrapping within the address family.
func addOffset(a netip.Addr, off uint64) netip.Addr { return addOffset128(a, 0, off) }

// addOffset128 returns a plus the 128-bit offset offHi<<64|offLo, wrapping
// within the address family (IPv4 uses only offLo).
func addOffset128(a netip.Addr, offHi, offLo uint64) netip.Addr {
	if a.Is4() {
		b := a.As4()
		v := binary.BigEndian.Uint32(b[:]) + uint32(offLo)
		binary.BigEndian.PutUint32(b[:], v)
		return netip.AddrFrom4(b)
	}
	b := a.As16()
	lo, carry := bits.Add64(binary.BigEndian.Uint64(b[8:]), offLo, 0)
	hi, _ := bits.Add64(binary.BigEndian.Uint64(b[:8]), offHi, carry)
	binary.BigEndian.PutUint64(b[:8], hi)
	binary.BigEndian.PutUint64(b[8:], lo)
	return netip.AddrFrom16(b)
}

// Diff128 returns a-base as a 128-bit number hi<<64|lo (a >= base).
func Diff128(base, a netip.Addr) (hi, lo uint64) {
	if a.Is4() {
		return 0, offsetOf(base, a)
	}
	x, y := base.As16(), a.As16()
	lo, borrow := bits.Sub64(binary.BigEndian.Uint64(y[8:]), binary.BigEndian.Uint64(x[8:]), 0)
	hi, _ = bits.Sub64(binary.BigEndian.Uint64(y[:8]), binary.BigEndian.Uint64(x[:8]), borrow)
	return hi, lo
}

// offsetOf returns a-base for addresses at most 2^64-1 apart (callers
// guarantee both are in one block or pool of bounded size).
func offsetOf(base, a netip.Addr) uint64 {
	if a.Is4() {
		x, y := base.As4(), a.As4()
		return uint64(binary.BigEndian.Uint32(y[:]) - binary.BigEndian.Uint32(x[:]))
	}
	x, y := base.As16(), a.As16()
	return binary.BigEndian.Uint64(y[8:]) - binary.BigEndian.Uint64(x[8:])
}

// LastAddr returns the highest address of p (the broadcast address for
// IPv4), or the zero Addr for an invalid p.
func LastAddr(p netip.Prefix) netip.Addr {
	if !p.IsValid() {
		return netip.Addr{}
	}
	base := p.Masked().Addr()
	hb := hostBits(p)
	if base.Is4() {
		b := base.As4()
		v := binary.BigEndian.Uint32(b[:]) | uint32(uint64(1)<<uint(hb)-1)
		binary.BigEndian.PutUint32(b[:], v)
		return netip.AddrFrom4(b)
	}
	b := base.As16()
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	if hb >= 64 {
		lo = ^uint64(0)
		hi |= uint64(1)<<uint(hb-64) - 1
		if hb == 128 {
			hi = ^uint64(0)
		}
	} else {
		lo |= uint64(1)<<uint(hb) - 1
	}
	binary.BigEndian.PutUint64(b[:8], hi)
	binary.BigEndian.PutUint64(b[8:], lo)
	return netip.AddrFrom16(b)
}

// hostBits is the number of host bits of p.
func hostBits(p netip.Prefix) int { return p.Addr().BitLen() - p.Bits() }
