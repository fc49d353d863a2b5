package ipam_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// fuzzPools are the pools FuzzBlockOps works on: /26 and /122 cut into
// 16-address blocks, with a gateway, an exclude and (IPv4) a broadcast
// address in the last block.
var fuzzPools = [2]ipam.Pool{
	{Name: "f4", CIDR: prefix("10.0.0.0/26"), BlockSize: 28, Gateway: addr("10.0.0.1"), Exclude: pfxs("10.0.0.4/31", "10.0.0.56/30")},
	{Name: "f6", CIDR: prefix("fd00::/122"), BlockSize: 124, Gateway: addr("fd00::1"), Exclude: pfxs("fd00::4/127", "fd00::38/126")},
}

// FuzzBlockOps runs a random sequence of Assign, AssignAddr and Release on
// one block against a model (a FIFO queue and an owner map) and checks
// after every step that the result matches the model, that Check finds
// nothing and that the input block was not changed.
func FuzzBlockOps(f *testing.F) {
	f.Add(false, uint8(0), []byte{0, 0, 0, 1, 2, 0, 0, 0, 3, 0})
	f.Add(true, uint8(3), []byte{1, 7, 0, 0, 3, 1, 0, 2, 0, 3, 0, 0})
	f.Add(false, uint8(3), []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 9, 3, 2, 0, 0})
	f.Fuzz(func(t *testing.T, v6 bool, blockIdx uint8, ops []byte) {
		pool := fuzzPools[0]
		if v6 {
			pool = fuzzPools[1]
		}
		b := ipam.NewBlock(pool, pool.BlockAt(uint64(blockIdx)%pool.NumBlocks()), "n")
		queue := slices.Clone(b.Free)
		owners := map[int]string{}
		permitted := func(ord int) bool { return pool.Permits(b.Addr(ord)) }

		for i := 0; i+1 < len(ops); i += 2 {
			code, arg := ops[i]%4, int(ops[i+1])
			handle := fmt.Sprintf("h%d", arg>>5)
			before := deepCopy(b)
			var (
				nb   ipam.Block
				err  error
				desc string
			)
			switch code {
			case 0: // Assign
				desc = "Assign(" + handle + ")"
				var a netip.Addr
				nb, a, err = b.Assign(pool, handle)
				qi := slices.IndexFunc(queue, permitted)
				if qi < 0 {
					if !errors.Is(err, ipam.ErrBlockFull) {
						t.Fatalf("%s = %s, %v; model has no permitted free address", desc, a, err)
					}
					break
				}
				if err != nil || a != b.Addr(queue[qi]) {
					t.Fatalf("%s = %s, %v, want %s", desc, a, err, b.Addr(queue[qi]))
				}
				owners[queue[qi]] = handle
				queue = slices.Delete(queue, qi, qi+1)
			case 1: // AssignAddr
				ord := arg % (b.Size() + 1) // b.Size() is just outside
				a := b.Addr(ord)
				desc = fmt.Sprintf("AssignAddr(%s, %s)", a, handle)
				nb, err = b.AssignAddr(pool, a, handle)
				qi := slices.Index(queue, ord)
				switch {
				case ord == b.Size():
					if !errors.Is(err, ipam.ErrNotInBlock) {
						t.Fatalf("%s = %v, want ErrNotInBlock", desc, err)
					}
				case !permitted(ord) || qi < 0:
					if !errors.Is(err, ipam.ErrUnavailable) {
						t.Fatalf("%s = %v, want ErrUnavailable", desc, err)
					}
				default:
					if err != nil {
						t.Fatalf("%s = %v", desc, err)
					}
					owners[ord] = handle
					queue = slices.Delete(queue, qi, qi+1)
				}
			case 2: // Release by a possibly wrong handle
				ord := arg % b.Size()
				desc = fmt.Sprintf("Release(%s, %s)", b.Addr(ord), handle)
				nb, err = b.Release(b.Addr(ord), handle)
				if owners[ord] != handle {
					if !errors.Is(err, ipam.ErrNotOwner) {
						t.Fatalf("%s = %v, want ErrNotOwner (owner %q)", desc, err, owners[ord])
					}
					break
				}
				if err != nil {
					t.Fatalf("%s = %v", desc, err)
				}
				delete(owners, ord)
				queue = append(queue, ord)
			case 3: // Release one held address by its owner
				held := slices.Sorted(maps.Keys(owners))
				if len(held) == 0 {
					continue
				}
				ord := held[arg%len(held)]
				desc = fmt.Sprintf("Release(%s, %s)", b.Addr(ord), owners[ord])
				if nb, err = b.Release(b.Addr(ord), owners[ord]); err != nil {
					t.Fatalf("%s = %v", desc, err)
				}
				delete(owners, ord)
				queue = append(queue, ord)
			}
			unchanged(t, desc, before, b)
			if err != nil {
				unchanged(t, desc+" result", before, nb)
				continue
			}
			b = nb
			if probs := b.Check(); len(probs) > 0 {
				t.Fatalf("after %s: %v", desc, probs)
			}
			if !slices.Equal(b.Free, queue) {
				t.Fatalf("after %s: free queue %v, model %v", desc, b.Free, queue)
			}
			if !maps.Equal(b.Owners, owners) {
				t.Fatalf("after %s: owners %v, model %v", desc, b.Owners, owners)
			}
		}
	})
}

// FuzzPoolBlockIndex checks that BlockAt and BlockIndex are inverse and
// stay inside the pool for any valid pool, including IPv6 pools wider than
// 64 host bits.
func FuzzPoolBlockIndex(f *testing.F) {
	f.Add(false, uint64(0x0a000000), uint64(0), uint8(16), uint8(26), uint64(5))
	f.Add(true, uint64(0xfd00000000000000), uint64(0), uint8(60), uint8(122), uint64(1<<61+7))
	f.Add(true, uint64(0xfd00000000000000), uint64(0), uint8(50), uint8(112), uint64(1<<62-1))
	f.Fuzz(func(t *testing.T, v6 bool, hi, lo uint64, bits, blockSize uint8, idx uint64) {
		var base netip.Addr
		if v6 {
			var b [16]byte
			binary.BigEndian.PutUint64(b[:8], hi)
			binary.BigEndian.PutUint64(b[8:], lo)
			base = netip.AddrFrom16(b)
		} else {
			var b [4]byte
			binary.BigEndian.PutUint32(b[:], uint32(lo))
			base = netip.AddrFrom4(b)
		}
		cidr, err := base.Prefix(int(bits) % (base.BitLen() + 1))
		if err != nil {
			t.Fatal(err)
		}
		p := ipam.Pool{Name: "z", CIDR: cidr, BlockSize: int(blockSize) % (base.BitLen() + 1)}
		// The shape rules of Validate, without its (slow, for huge pools)
		// count of usable addresses.
		if p.BlockSize < p.CIDR.Bits() || p.BlockSize-p.CIDR.Bits() > 62 || base.BitLen()-p.BlockSize > ipam.MaxBlockHostBits {
			return
		}
		i := idx % p.NumBlocks()
		blk := p.BlockAt(i)
		if blk.Bits() != p.BlockSize || !p.CIDR.Contains(blk.Addr()) || blk != blk.Masked() {
			t.Fatalf("pool %s /%d: BlockAt(%d) = %s", p.CIDR, p.BlockSize, i, blk)
		}
		b := ipam.NewBlock(p, blk, "")
		for _, a := range []netip.Addr{blk.Addr(), b.Addr(b.Size() - 1)} {
			if got, ok := p.BlockIndex(a); !ok || got != i {
				t.Fatalf("pool %s /%d: BlockIndex(%s) = %d, %v, want %d", p.CIDR, p.BlockSize, a, got, ok, i)
			}
		}
		if i > 0 && p.BlockAt(i-1).Overlaps(blk) {
			t.Fatalf("pool %s /%d: blocks %d and %d overlap", p.CIDR, p.BlockSize, i-1, i)
		}
	})
}
