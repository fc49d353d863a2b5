package ipam_test

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// blockCase is one family's pool and block of a block test: the first
// block of a pool with a gateway, so its ordinals 0 (network) and 1
// (gateway) are never handed out, and an exclude at ordinals 4 and 5.
type blockCase struct {
	pool  ipam.Pool
	block netip.Prefix
}

var (
	blk4 = blockCase{
		pool:  ipam.Pool{Name: "p4", CIDR: prefix("10.0.0.0/24"), BlockSize: 29, Gateway: addr("10.0.0.1"), Exclude: pfxs("10.0.0.4/31")},
		block: prefix("10.0.0.0/29"),
	}
	blk6 = blockCase{
		pool:  ipam.Pool{Name: "p6", CIDR: prefix("fd00::/120"), BlockSize: 125, Gateway: addr("fd00::1"), Exclude: pfxs("fd00::4/127")},
		block: prefix("fd00::/125"),
	}
)

// at returns the address at ordinal ord of the case's block.
func (c blockCase) at(ord int) netip.Addr {
	a := c.block.Addr()
	for range ord {
		a = a.Next()
	}
	return a
}

// deepCopy snapshots a block so tests can prove operations never change
// their input.
func deepCopy(b ipam.Block) ipam.Block {
	c := b
	c.Owners = maps.Clone(b.Owners)
	c.Free = slices.Clone(b.Free)
	return c
}

// unchanged fails when b differs from the snapshot taken before an
// operation on it.
func unchanged(t *testing.T, op string, before, after ipam.Block) {
	t.Helper()
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("%s changed its input block:\nbefore %+v\nafter  %+v", op, before, after)
	}
}

func mustAssign(t *testing.T, c blockCase, b ipam.Block, h string) (ipam.Block, netip.Addr) {
	t.Helper()
	snap := deepCopy(b)
	nb, a, err := b.Assign(c.pool, h)
	if err != nil {
		t.Fatalf("Assign(%s): %v", h, err)
	}
	unchanged(t, "Assign", snap, b)
	if probs := nb.Check(); len(probs) > 0 {
		t.Fatalf("block after Assign: %v", probs)
	}
	return nb, a
}

func mustRelease(t *testing.T, b ipam.Block, a netip.Addr, h string) ipam.Block {
	t.Helper()
	snap := deepCopy(b)
	nb, err := b.Release(a, h)
	if err != nil {
		t.Fatalf("Release(%s, %s): %v", a, h, err)
	}
	unchanged(t, "Release", snap, b)
	if probs := nb.Check(); len(probs) > 0 {
		t.Fatalf("block after Release: %v", probs)
	}
	return nb
}

func TestNewBlock(t *testing.T) {
	family(t, &blk4, &blk6, func(t *testing.T, c blockCase) {
		b := ipam.NewBlock(c.pool, c.block, "node-a")
		if b.CIDR != c.block || b.Pool != c.pool.Name || b.Node != "node-a" {
			t.Errorf("NewBlock = %+v", b)
		}
		if b.Size() != 8 || b.InUse() != 0 || len(b.Owners) != 0 {
			t.Errorf("Size %d InUse %d Owners %v, want 8, 0, none", b.Size(), b.InUse(), b.Owners)
		}
		if want := []int{0, 1, 2, 3, 4, 5, 6, 7}; !slices.Equal(b.Free, want) {
			t.Errorf("Free = %v, want %v", b.Free, want)
		}
		// network, gateway and two excluded addresses are not counted.
		if n := b.FreeCount(c.pool); n != 4 {
			t.Errorf("FreeCount = %d, want 4", n)
		}
		if probs := b.Check(); len(probs) > 0 {
			t.Errorf("Check = %v", probs)
		}
		for ord := range 8 {
			if got := b.Addr(ord); got != c.at(ord) {
				t.Errorf("Addr(%d) = %s, want %s", ord, got, c.at(ord))
			}
			if got, err := b.Ordinal(c.at(ord)); err != nil || got != ord {
				t.Errorf("Ordinal(%s) = %d, %v, want %d", c.at(ord), got, err, ord)
			}
		}
		if _, err := b.Ordinal(c.at(8)); !errors.Is(err, ipam.ErrNotInBlock) {
			t.Errorf("Ordinal(%s) = %v, want ErrNotInBlock", c.at(8), err)
		}
	})
}

func TestBlockAssignOrder(t *testing.T) {
	// Permitted ordinals of the test block: 2, 3, 6, 7.
	family(t, &blk4, &blk6, func(t *testing.T, c blockCase) {
		b := ipam.NewBlock(c.pool, c.block, "n")
		for i, ord := range []int{2, 3, 6, 7} {
			var a netip.Addr
			b, a = mustAssign(t, c, b, fmt.Sprintf("h%d", i))
			if a != c.at(ord) {
				t.Fatalf("assignment %d = %s, want %s (ordinal %d)", i, a, c.at(ord), ord)
			}
			if got := b.Owner(a); got != fmt.Sprintf("h%d", i) {
				t.Errorf("Owner(%s) = %q", a, got)
			}
		}
		snap := deepCopy(b)
		nb, a, err := b.Assign(c.pool, "late")
		if !errors.Is(err, ipam.ErrBlockFull) || a.IsValid() {
			t.Fatalf("Assign on a full block = %s, %v, want ErrBlockFull", a, err)
		}
		unchanged(t, "failed Assign", snap, b)
		unchanged(t, "failed Assign result", snap, nb)
		if b.FreeCount(c.pool) != 0 || b.InUse() != 4 {
			t.Errorf("FreeCount %d InUse %d, want 0, 4", b.FreeCount(c.pool), b.InUse())
		}
	})
}

func TestBlockAssignBroadcastAndOtherPool(t *testing.T) {
	// The last block of an IPv4 pool never hands out the broadcast
	// address; IPv6 has none.
	type c struct {
		pool  ipam.Pool
		block netip.Prefix
		want  int
	}
	family(t,
		&c{ipam.Pool{Name: "a", CIDR: prefix("10.0.0.0/28"), BlockSize: 29}, prefix("10.0.0.8/29"), 7},
		&c{ipam.Pool{Name: "a", CIDR: prefix("fd00::/124"), BlockSize: 125}, prefix("fd00::8/125"), 8},
		func(t *testing.T, c c) {
			b := ipam.NewBlock(c.pool, c.block, "n")
			n := 0
			for {
				nb, _, err := b.Assign(c.pool, "h")
				if errors.Is(err, ipam.ErrBlockFull) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				b, n = nb, n+1
				if n > b.Size() {
					// A block cannot hand out more than it holds: stop
					// instead of looping until the test times out.
					t.Fatalf("block %s handed out %d addresses, more than its %d", c.block, n, b.Size())
				}
			}
			if n != c.want {
				t.Errorf("last block handed out %d addresses, want %d", n, c.want)
			}
		})
}

func TestBlockFIFO(t *testing.T) {
	family(t, &blk4, &blk6, func(t *testing.T, c blockCase) {
		t.Run("just released is handed out last", func(t *testing.T) {
			b := ipam.NewBlock(c.pool, c.block, "n")
			b, first := mustAssign(t, c, b, "h0")
			b = mustRelease(t, b, first, "h0")
			var got []netip.Addr
			for i := range 4 {
				var a netip.Addr
				b, a = mustAssign(t, c, b, fmt.Sprintf("x%d", i))
				got = append(got, a)
			}
			want := []netip.Addr{c.at(3), c.at(6), c.at(7), c.at(2)}
			if !slices.Equal(got, want) {
				t.Errorf("after releasing %s: handed out %v, want %v", first, got, want)
			}
		})
		t.Run("released come back in release order", func(t *testing.T) {
			b := ipam.NewBlock(c.pool, c.block, "n")
			for i := range 3 {
				b, _ = mustAssign(t, c, b, fmt.Sprintf("h%d", i)) // ordinals 2, 3, 6
			}
			// Release A (ordinal 3) then B (ordinal 2): against address order.
			b = mustRelease(t, b, c.at(3), "h1")
			b = mustRelease(t, b, c.at(2), "h0")
			var got []netip.Addr
			for i := range 3 {
				var a netip.Addr
				b, a = mustAssign(t, c, b, fmt.Sprintf("y%d", i))
				got = append(got, a)
			}
			want := []netip.Addr{c.at(7), c.at(3), c.at(2)}
			if !slices.Equal(got, want) {
				t.Errorf("handed out %v, want the unused %s first, then %s, %s in release order", got, want[0], want[1], want[2])
			}
		})
	})
}

func TestBlockAssignAddr(t *testing.T) {
	family(t, &blk4, &blk6, func(t *testing.T, c blockCase) {
		b := ipam.NewBlock(c.pool, c.block, "n")
		b, err := b.AssignAddr(c.pool, c.at(6), "h6")
		if err != nil {
			t.Fatal(err)
		}
		if b.Owner(c.at(6)) != "h6" || slices.Contains(b.Free, 6) || len(b.Check()) > 0 {
			t.Fatalf("after AssignAddr: %+v %v", b, b.Check())
		}
		tests := []struct {
			name string
			a    netip.Addr
			want error
			msg  string
		}{
			{"taken", c.at(6), ipam.ErrUnavailable, "held by h6"},
			{"network", c.at(0), ipam.ErrUnavailable, "reserved"},
			{"gateway", c.at(1), ipam.ErrUnavailable, "reserved"},
			{"excluded", c.at(5), ipam.ErrUnavailable, "reserved"},
			{"outside the block", c.at(8), ipam.ErrNotInBlock, "not in"},
			{"other family", addr("::"), ipam.ErrNotInBlock, "not in"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				snap := deepCopy(b)
				nb, err := b.AssignAddr(c.pool, tt.a, "other")
				if !errors.Is(err, tt.want) || !strings.Contains(fmt.Sprint(err), tt.msg) {
					t.Errorf("AssignAddr(%s) = %v, want %v mentioning %q", tt.a, err, tt.want, tt.msg)
				}
				unchanged(t, "failed AssignAddr", snap, b)
				unchanged(t, "failed AssignAddr result", snap, nb)
			})
		}
		// Assign skips the address taken by AssignAddr.
		var got []netip.Addr
		for i := range 3 {
			var a netip.Addr
			b, a = mustAssign(t, c, b, fmt.Sprint(i))
			got = append(got, a)
		}
		if want := []netip.Addr{c.at(2), c.at(3), c.at(7)}; !slices.Equal(got, want) {
			t.Errorf("Assign after AssignAddr gave %v, want %v", got, want)
		}
	})
}

func TestBlockRelease(t *testing.T) {
	family(t, &blk4, &blk6, func(t *testing.T, c blockCase) {
		b := ipam.NewBlock(c.pool, c.block, "n")
		b, a := mustAssign(t, c, b, "h")
		tests := []struct {
			name   string
			a      netip.Addr
			handle string
			want   error
		}{
			{"wrong handle", a, "intruder", ipam.ErrNotOwner},
			{"empty handle", a, "", ipam.ErrNotOwner},
			{"free address", c.at(3), "h", ipam.ErrNotOwner},
			{"reserved address", c.at(1), "h", ipam.ErrNotOwner},
			{"outside the block", c.at(9), "h", ipam.ErrNotInBlock},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				snap := deepCopy(b)
				nb, err := b.Release(tt.a, tt.handle)
				if !errors.Is(err, tt.want) {
					t.Errorf("Release(%s, %q) = %v, want %v", tt.a, tt.handle, err, tt.want)
				}
				unchanged(t, "failed Release", snap, b)
				unchanged(t, "failed Release result", snap, nb)
			})
		}
		nb := mustRelease(t, b, a, "h")
		if nb.InUse() != 0 || nb.Owner(a) != "" || nb.Free[len(nb.Free)-1] != 2 {
			t.Errorf("after Release: %+v, want ordinal 2 at the back of the free queue", nb)
		}
		if _, err := nb.Release(a, "h"); !errors.Is(err, ipam.ErrNotOwner) {
			t.Errorf("second Release = %v, want ErrNotOwner", err)
		}
	})
}

func TestBlockAllocations(t *testing.T) {
	family(t, &blk4, &blk6, func(t *testing.T, c blockCase) {
		b := ipam.NewBlock(c.pool, c.block, "n")
		if got := b.Allocations(); len(got) != 0 {
			t.Errorf("empty block Allocations = %v", got)
		}
		var err error
		for _, ord := range []int{7, 2, 6, 3} {
			if b, err = b.AssignAddr(c.pool, c.at(ord), fmt.Sprintf("h%d", ord)); err != nil {
				t.Fatal(err)
			}
		}
		want := []ipam.Allocation{
			{Addr: c.at(2), Handle: "h2"}, {Addr: c.at(3), Handle: "h3"},
			{Addr: c.at(6), Handle: "h6"}, {Addr: c.at(7), Handle: "h7"},
		}
		if got := b.Allocations(); !slices.Equal(got, want) {
			t.Errorf("Allocations = %v, want %v", got, want)
		}
	})
}

func TestBlockCheck(t *testing.T) {
	family(t, &blk4, &blk6, func(t *testing.T, c blockCase) {
		healthy := ipam.NewBlock(c.pool, c.block, "n")
		healthy, _ = mustAssign(t, c, healthy, "h") // ordinal 2
		if probs := healthy.Check(); len(probs) > 0 {
			t.Fatalf("healthy block: %v", probs)
		}
		tests := []struct {
			name    string
			breakIt func(b *ipam.Block)
			want    []string
		}{
			{"free and allocated", func(b *ipam.Block) { b.Free = append(b.Free, 2) },
				[]string{fmt.Sprintf("%s both free and held by h", c.at(2))}},
			{"free ordinal out of range", func(b *ipam.Block) { b.Free = append(b.Free, 8, -1) },
				[]string{"free ordinal -1 out of range", "free ordinal 8 out of range"}},
			{"twice in the free queue", func(b *ipam.Block) { b.Free = append(b.Free, 5) },
				[]string{fmt.Sprintf("ordinal 5 (%s) twice in the free queue", c.at(5))}},
			{"allocated ordinal out of range", func(b *ipam.Block) { b.Owners[8] = "x" },
				[]string{"allocated ordinal 8 out of range"}},
			{"empty handle", func(b *ipam.Block) {
				b.Free = slices.DeleteFunc(b.Free, func(o int) bool { return o == 3 })
				b.Owners[3] = ""
			}, []string{fmt.Sprintf("%s allocated to an empty handle", c.at(3))}},
			{"lost address", func(b *ipam.Block) { b.Free = slices.DeleteFunc(b.Free, func(o int) bool { return o == 7 }) },
				[]string{fmt.Sprintf("%s neither free nor allocated", c.at(7))}},
			{"lost allocation", func(b *ipam.Block) { delete(b.Owners, 2) },
				[]string{fmt.Sprintf("%s neither free nor allocated", c.at(2))}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				b := deepCopy(healthy)
				tt.breakIt(&b)
				if got := b.Check(); !slices.Equal(got, tt.want) {
					t.Errorf("Check = %q, want %q", got, tt.want)
				}
			})
		}
	})
}

// TestBlockPurityChain runs a sequence of operations keeping every
// intermediate block and proves that none of them changed afterwards.
func TestBlockPurityChain(t *testing.T) {
	family(t, &blk4, &blk6, func(t *testing.T, c blockCase) {
		var history, snaps []ipam.Block
		b := ipam.NewBlock(c.pool, c.block, "n")
		keep := func(nb ipam.Block) {
			history = append(history, nb)
			snaps = append(snaps, deepCopy(nb))
			b = nb
		}
		keep(b)
		var a2, a3 netip.Addr
		nb, a2, _ := b.Assign(c.pool, "h2")
		keep(nb)
		nb, a3, _ = b.Assign(c.pool, "h3")
		keep(nb)
		nb, _ = b.AssignAddr(c.pool, c.at(7), "h7")
		keep(nb)
		nb, _ = b.Release(a2, "h2")
		keep(nb)
		nb, _ = b.Release(a3, "h3")
		keep(nb)
		nb, _, _ = b.Assign(c.pool, "h6")
		keep(nb)
		for i := range history {
			unchanged(t, fmt.Sprintf("step %d", i), snaps[i], history[i])
		}
		if got := b.Allocations(); len(got) != 2 || got[0].Addr != c.at(6) || got[1].Addr != c.at(7) {
			t.Errorf("final allocations %v", got)
		}
	})
}
