package allocator_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/labels"
)

func TestAllocateClaimsBlocks(t *testing.T) {
	ctx := context.Background()
	forFams(t, func(t *testing.T, f fam) {
		a, s := setup(t, f.pool("p", 4))

		h := allocate(t, a, "node-a", "h1", set("p"))
		want := ipam.HandleIP{Addr: f.addr(1), Pool: "p", Block: f.block(0)}
		if len(h.IPs) != 1 || h.IPs[0] != want || h.Node != "node-a" || !h.Created.Equal(epoch) {
			t.Fatalf("first allocation = %+v, want %v (network address skipped) at %v", h, want, epoch)
		}
		stored, ok, err := a.Handle(ctx, "h1")
		if err != nil || !ok || !reflect.DeepEqual(stored, h) {
			t.Fatalf("stored handle = %+v, %v, %v; want %+v", stored, ok, err, h)
		}
		es, err := s.Get(ctx, allocator.AffinityKey("node-a", "p", f.block(0)))
		if err != nil || es[0].Version == 0 || string(es[0].Value) != allocator.BlockKey("p", f.block(0)) {
			t.Fatalf("affinity of node-a = %+v, %v", es, err)
		}

		// The node allocates from its own block first.
		if h := allocate(t, a, "node-a", "h2", set("p")); h.IPs[0].Addr != f.addr(2) {
			t.Errorf("second allocation on node-a = %s, want %s", h.IPs[0].Addr, f.addr(2))
		}
		// Another node claims another block.
		hb := allocate(t, a, "node-b", "h3", set("p"))
		if hb.IPs[0].Block == f.block(0) || !hb.IPs[0].Block.Contains(hb.IPs[0].Addr) {
			t.Fatalf("node-b got %+v, want an address of its own block", hb.IPs[0])
		}
		blocks := blocksByCIDR(t, a, "p")
		if len(blocks) != 2 || blocks[f.block(0)].Node != "node-a" || blocks[hb.IPs[0].Block].Node != "node-b" {
			t.Fatalf("blocks = %+v", blocks)
		}
		if got := keys(t, s, "affinity/"); len(got) != 2 {
			t.Errorf("affinity keys = %v, want one per node", got)
		}
		checkConsistent(t, a, s)
	})
}

// TestAllocateBorrowAndStrict fills a pool of two blocks claimed by two
// nodes: a third node, and a node whose own block is full, borrow from the
// other block unless the pool is strict.
func TestAllocateBorrowAndStrict(t *testing.T) {
	ctx := context.Background()
	for _, strict := range []bool{false, true} {
		t.Run(fmt.Sprintf("strict=%v", strict), func(t *testing.T) {
			forFams(t, func(t *testing.T, f fam) {
				p := f.pool("p", 2)
				p.StrictAffinity = strict
				a, s := setup(t, p)
				allocate(t, a, "node-a", "a0", set("p")) // block 0
				allocate(t, a, "node-b", "b0", set("p")) // block 1

				hasFree := func(node string, want bool) {
					t.Helper()
					got, err := a.HasFree(ctx, p, node)
					if err != nil || got != want {
						t.Errorf("HasFree(%s) = %v, %v, want %v", node, got, err, want)
					}
				}

				// A node without a block while none is unclaimed.
				hasFree("node-c", !strict)
				before := snapshot(t, s)
				hc, err := a.Allocate(ctx, request("node-c", "c0", set("p")))
				if strict {
					if !errors.Is(err, allocator.ErrExhausted) {
						t.Fatalf("strict pool: node-c Allocate = %+v, %v, want ErrExhausted", hc, err)
					}
					sameStore(t, "exhausted Allocate", before, s)
				} else {
					if err != nil || hc.IPs[0].Block != f.block(0) {
						t.Fatalf("node-c Allocate = %+v, %v, want a borrowed address of block 0", hc, err)
					}
					if blocksByCIDR(t, a, "p")[f.block(0)].Node != "node-a" || len(keys(t, s, "affinity/node-c/")) > 0 {
						t.Errorf("borrowing changed the block's affinity")
					}
				}

				// node-a fills its own block (7 addresses: the network one is never used).
				for i := 0; blocksByCIDR(t, a, "p")[f.block(0)].FreeCount(p) > 0; i++ {
					h := allocate(t, a, "node-a", fmt.Sprintf("a%d", i+1), set("p"))
					if h.IPs[0].Block != f.block(0) {
						t.Fatalf("node-a allocated from %s while its own block has room", h.IPs[0].Block)
					}
				}
				hasFree("node-a", !strict)
				hasFree("node-b", true)
				before = snapshot(t, s)
				ha, err := a.Allocate(ctx, request("node-a", "a-over", set("p")))
				if strict {
					if !errors.Is(err, allocator.ErrExhausted) || !strings.Contains(err.Error(), "p") {
						t.Fatalf("strict pool: full node-a Allocate = %+v, %v, want ErrExhausted naming the pool", ha, err)
					}
					sameStore(t, "exhausted Allocate", before, s)
				} else if err != nil || ha.IPs[0].Block != f.block(1) {
					t.Fatalf("full node-a Allocate = %+v, %v, want a borrowed address of block 1", ha, err)
				}

				// Fill everything: then nobody gets an address.
				for i := 0; blocksByCIDR(t, a, "p")[f.block(1)].FreeCount(p) > 0; i++ {
					allocate(t, a, "node-b", fmt.Sprintf("b%d", i+1), set("p"))
				}
				for _, n := range []string{"node-a", "node-b", "node-c"} {
					hasFree(n, false)
					before = snapshot(t, s)
					if _, err := a.Allocate(ctx, request(n, "late-"+n, set("p"))); !errors.Is(err, allocator.ErrExhausted) {
						t.Errorf("Allocate on %s in a full pool = %v, want ErrExhausted", n, err)
					}
					sameStore(t, "exhausted Allocate", before, s)
				}
				if owners := checkConsistent(t, a, s); len(owners) != 15-1+boolInt(f.name == "v6") {
					t.Errorf("%d addresses allocated, want every permitted one", len(owners))
				}
			})
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestAllocateNextPoolOfSet(t *testing.T) {
	forFams(t, func(t *testing.T, f fam) {
		first := f.pool("first", 1)
		first.RangeStart, first.RangeEnd = f.addr(2), f.addr(3)
		a, s := setup(t, first, f.pool2("second", 1))
		var got []netip.Addr
		for i := range 3 {
			got = append(got, allocate(t, a, "n", fmt.Sprint(i), set("first", "second")).IPs[0].Addr)
		}
		if want := []netip.Addr{f.addr(2), f.addr(3), f.addr(1025)}; !slices.Equal(got, want) {
			t.Errorf("allocations = %v, want %v (first pool, then the next one)", got, want)
		}
		checkConsistent(t, a, s)
	})
}

func TestAllocateDualStack(t *testing.T) {
	ctx := context.Background()
	v4, v6 := fams[0], fams[1]
	p4, p6 := v4.pool("p4", 4), v6.pool("p6", 1)
	sets := [][]string{set("p4"), set("p6")}

	a, s := setup(t, p4, p6)
	h := allocate(t, a, "node-a", "both", sets...)
	if len(h.IPs) != 2 || !h.IPs[0].Addr.Is4() || !h.IPs[1].Addr.Is6() || h.IPs[0].Pool != "p4" || h.IPs[1].Pool != "p6" {
		t.Fatalf("dual-stack handle = %+v, want one IPv4 then one IPv6 address", h)
	}
	// Use up the IPv6 pool (7 addresses) from another node.
	for i := 0; ; i++ {
		if i > 8 {
			// One /125 block holds 8 addresses: stop instead of
			// looping until the test times out.
			t.Fatalf("pool p6 handed out %d addresses, more than its block holds", i)
		}
		if _, err := a.Allocate(ctx, request("node-z", fmt.Sprintf("z%d", i), set("p6"))); errors.Is(err, allocator.ErrExhausted) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct{ name, node string }{
		{"node with its own IPv4 block", "node-a"},
		{"new node that would claim an IPv4 block", "node-new"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := snapshot(t, s)
			got, err := a.Allocate(ctx, request(tt.node, "dual-"+tt.node, sets...))
			if !errors.Is(err, allocator.ErrExhausted) || !strings.Contains(err.Error(), "p6") {
				t.Fatalf("Allocate = %+v, %v, want ErrExhausted naming p6", got, err)
			}
			sameStore(t, "failed dual-stack Allocate", before, s)
			if _, ok, _ := a.Handle(ctx, "dual-"+tt.node); ok {
				t.Errorf("failed Allocate left a handle")
			}
		})
	}
	// Releasing one IPv6 address makes dual-stack work again.
	if _, err := a.Release(ctx, "z3"); err != nil {
		t.Fatal(err)
	}
	if h := allocate(t, a, "node-new", "dual-again", sets...); len(h.IPs) != 2 {
		t.Fatalf("handle = %+v", h)
	}
	checkConsistent(t, a, s)
}

func TestAllocateIdempotent(t *testing.T) {
	ctx := context.Background()
	forFams(t, func(t *testing.T, f fam) {
		a, s := setup(t, f.pool("p", 2), f.pool2("q", 2))
		h1 := allocate(t, a, "node-a", "h", set("p"))
		a.Now = func() time.Time { return epoch.Add(time.Hour) }
		before := snapshot(t, s)
		// The same handle again, even asking for another pool and node,
		// returns the stored handle and writes nothing.
		h2, err := a.Allocate(ctx, request("node-b", "h", set("q")))
		if err != nil || !reflect.DeepEqual(h1, h2) {
			t.Fatalf("repeated Allocate = %+v, %v, want %+v", h2, err, h1)
		}
		sameStore(t, "repeated Allocate", before, s)
		if n := len(checkConsistent(t, a, s)); n != 1 {
			t.Errorf("%d addresses in use, want 1", n)
		}
	})
}

func TestRelease(t *testing.T) {
	ctx := context.Background()
	forFams(t, func(t *testing.T, f fam) {
		a, s := setup(t, f.pool("p", 1))
		h1 := allocate(t, a, "n", "h1", set("p"))
		allocate(t, a, "n", "h2", set("p"))

		freed, err := a.Release(ctx, "h1")
		if err != nil || !slices.Equal(freed, []netip.Addr{h1.IPs[0].Addr}) {
			t.Fatalf("Release = %v, %v, want %v", freed, err, h1.IPs[0].Addr)
		}
		if _, ok, err := a.Handle(ctx, "h1"); ok || err != nil {
			t.Errorf("handle still there after Release (%v)", err)
		}
		if owner := blocksByCIDR(t, a, "p")[f.block(0)].Owner(h1.IPs[0].Addr); owner != "" {
			t.Errorf("%s still held by %q", h1.IPs[0].Addr, owner)
		}
		checkConsistent(t, a, s)

		before := snapshot(t, s)
		for _, id := range []string{"h1", "never-existed"} {
			freed, err := a.Release(ctx, id)
			if err != nil || len(freed) != 0 {
				t.Errorf("Release(%s) = %v, %v, want nothing and no error", id, freed, err)
			}
		}
		sameStore(t, "Release of a missing handle", before, s)

		// The released address went to the back of the queue.
		h3 := allocate(t, a, "n", "h3", set("p"))
		if h3.IPs[0].Addr == h1.IPs[0].Addr {
			t.Errorf("just-released %s handed out again while others are free", h1.IPs[0].Addr)
		}
	})
}

func TestReleaseDualStack(t *testing.T) {
	ctx := context.Background()
	a, s := setup(t, fams[0].pool("p4", 1), fams[1].pool("p6", 1))
	h := allocate(t, a, "n", "h", set("p4"), set("p6"))
	freed, err := a.Release(ctx, "h")
	if err != nil || !slices.Equal(freed, []netip.Addr{h.IPs[0].Addr, h.IPs[1].Addr}) {
		t.Fatalf("Release = %v, %v", freed, err)
	}
	if owners := checkConsistent(t, a, s); len(owners) != 0 {
		t.Errorf("still allocated: %v", owners)
	}
}

func TestAllocateNoPool(t *testing.T) {
	ctx := context.Background()
	forFams(t, func(t *testing.T, f fam) {
		disabled := f.pool("disabled", 1)
		disabled.Disabled = true
		zoneA := f.pool2("zone-a", 1)
		zoneA.NodeSelector = "zone=a"
		enabled := f.pool("enabled", 1)
		enabled.CIDR = netip.PrefixFrom(f.addr(2048), enabled.CIDR.Bits())
		badSel := f.pool("bad-selector", 1)
		badSel.CIDR = netip.PrefixFrom(f.addr(4096), badSel.CIDR.Bits())
		badSel.NodeSelector = "zone in a"
		a, s := setup(t, disabled, zoneA, enabled)
		// EnsurePool does not parse selectors; store one that fails to parse.
		if err := a.CreatePool(ctx, badSel); err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			name   string
			set    []string
			labels map[string]string
			want   error  // nil: success
			pool   string // the pool that must hand out the address
		}{
			{"disabled", set("disabled"), nil, allocator.ErrNoPool, ""},
			{"selector does not match", set("zone-a"), map[string]string{"zone": "b"}, allocator.ErrNoPool, ""},
			{"selector without labels", set("zone-a"), nil, allocator.ErrNoPool, ""},
			{"disabled and non-matching", set("disabled", "zone-a"), nil, allocator.ErrNoPool, ""},
			{"selector matches", set("zone-a"), map[string]string{"zone": "a"}, nil, "zone-a"},
			{"disabled pool is skipped", set("disabled", "enabled"), nil, nil, "enabled"},
			{"unparsable selector", set("bad-selector"), nil, labels.ErrSyntax, ""},
		}
		for i, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				before := snapshot(t, s)
				req := request("n", fmt.Sprint("h", i), tt.set)
				req.Labels = tt.labels
				h, err := a.Allocate(ctx, req)
				if tt.want == nil {
					if err != nil || h.IPs[0].Pool != tt.pool {
						t.Fatalf("Allocate = %+v, %v, want an address of %s", h, err, tt.pool)
					}
					return
				}
				if !errors.Is(err, tt.want) {
					t.Fatalf("Allocate = %+v, %v, want %v", h, err, tt.want)
				}
				for _, name := range tt.set {
					if !strings.Contains(err.Error(), name) {
						t.Errorf("error %q does not name pool %s", err, name)
					}
				}
				sameStore(t, "failed Allocate", before, s)
			})
		}
	})
}

func TestAllocateWant(t *testing.T) {
	ctx := context.Background()
	forFams(t, func(t *testing.T, f fam) {
		p := f.pool("p", 4)
		p.Gateway = f.addr(7)
		a, s := setup(t, p, f.pool2("other", 1))
		allocate(t, a, "node-a", "first", set("p")) // claims block 0, takes addr 1
		allocate(t, a, "node-b", "b", set("p"))     // claims block 1

		want := func(node, id string, w ...netip.Addr) (ipam.Handle, error) {
			req := request(node, id, set("p"))
			req.Want = w
			return a.Allocate(ctx, req)
		}
		tests := []struct {
			name string
			node string
			want netip.Addr
			err  error
		}{
			{"free in the node's block", "node-a", f.addr(5), nil},
			{"taken", "node-a", f.addr(5), allocator.ErrAddrUnavailable},
			{"taken by the first allocation", "node-b", f.addr(1), allocator.ErrAddrUnavailable},
			{"network address", "node-a", f.addr(0), allocator.ErrAddrUnavailable},
			{"gateway", "node-a", f.addr(7), allocator.ErrAddrUnavailable},
			{"free in another node's block", "node-a", f.addr(12), nil},
			{"free in an unclaimed block", "node-c", f.addr(19), nil},
			{"not in any pool of the request", "node-a", f.addr(900), allocator.ErrAddrUnavailable},
			{"in a pool the request does not name", "node-a", f.addr(1025), allocator.ErrAddrUnavailable},
		}
		for i, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				before := snapshot(t, s)
				h, err := want(tt.node, fmt.Sprint("w", i), tt.want)
				if tt.err != nil {
					if !errors.Is(err, tt.err) || !strings.Contains(err.Error(), tt.want.String()) {
						t.Fatalf("Allocate(want %s) = %+v, %v, want %v naming the address", tt.want, h, err, tt.err)
					}
					sameStore(t, "refused Allocate", before, s)
					return
				}
				if err != nil || len(h.IPs) != 1 || h.IPs[0].Addr != tt.want {
					t.Fatalf("Allocate(want %s) = %+v, %v", tt.want, h, err)
				}
				checkConsistent(t, a, s)
			})
		}
		// The unclaimed block was claimed by the node that asked.
		if b := blocksByCIDR(t, a, "p")[f.block(2)]; b.Node != "node-c" {
			t.Errorf("block 2 = %+v, want it claimed by node-c", b)
		}
		// Want in a dual-stack request applies to the matching set only.
		p6 := fams[1].pool("p6", 1)
		if f.name == "v4" {
			if _, err := a.EnsurePool(ctx, p6); err != nil {
				t.Fatal(err)
			}
			req := request("node-a", "dual", set("p"), set("p6"))
			req.Want = []netip.Addr{f.addr(20)}
			h, err := a.Allocate(ctx, req)
			if err != nil || h.IPs[0].Addr != f.addr(20) || !h.IPs[1].Addr.Is6() {
				t.Fatalf("dual-stack Allocate with an IPv4 wish = %+v, %v", h, err)
			}
		}
	})
}

func TestReleaseAddr(t *testing.T) {
	ctx := context.Background()
	a, s := setup(t, fams[0].pool("p4", 2), fams[1].pool("p6", 1))
	h := allocate(t, a, "n", "h", set("p4"), set("p6"))
	allocate(t, a, "n", "other", set("p4"))
	v4, v6 := h.IPs[0].Addr, h.IPs[1].Addr

	owner, err := a.ReleaseAddr(ctx, v4)
	if err != nil || owner.ID != "h" || len(owner.IPs) != 2 {
		t.Fatalf("ReleaseAddr(%s) = %+v, %v, want the handle as it was", v4, owner, err)
	}
	rest, ok, err := a.Handle(ctx, "h")
	if err != nil || !ok || len(rest.IPs) != 1 || rest.IPs[0].Addr != v6 {
		t.Fatalf("handle after ReleaseAddr = %+v, %v, %v, want only %s", rest, ok, err, v6)
	}
	checkConsistent(t, a, s)

	tests := []struct {
		name string
		a    netip.Addr
		want error
	}{
		{"already released", v4, allocator.ErrNotAllocated},
		{"never allocated", fams[0].addr(6), allocator.ErrNotAllocated},
		{"unclaimed block", fams[0].addr(9), allocator.ErrNotAllocated},
		{"in no pool", addr("192.0.2.1"), allocator.ErrPoolNotFound},
		{"in no pool (v6)", fams[1].addr(9), allocator.ErrPoolNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := snapshot(t, s)
			if _, err := a.ReleaseAddr(ctx, tt.a); !errors.Is(err, tt.want) {
				t.Errorf("ReleaseAddr(%s) = %v, want %v", tt.a, err, tt.want)
			}
			sameStore(t, "failed ReleaseAddr", before, s)
		})
	}

	if owner, err := a.ReleaseAddr(ctx, v6); err != nil || owner.ID != "h" {
		t.Fatalf("ReleaseAddr(%s) = %+v, %v", v6, owner, err)
	}
	if _, ok, _ := a.Handle(ctx, "h"); ok {
		t.Errorf("handle kept after its last address was released")
	}
	if owners := checkConsistent(t, a, s); len(owners) != 1 {
		t.Errorf("owners = %v, want only the other handle", owners)
	}
}
