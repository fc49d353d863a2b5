package consistency

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// brief renders problems as "kind addr handle" lines for comparison.
func brief(ps []Problem) []string {
	out := []string{}
	for _, p := range ps {
		out = append(out, strings.TrimSpace(fmt.Sprintf("%s %s %s", p.Kind, p.Addr, p.Handle)))
	}
	return out
}

type corruption struct {
	name string
	// corrupt damages the store and returns the problems expected, as
	// brief renders them.
	corrupt func(fx *fixture) []string
	// fixed says whether repair clears every problem.
	fixed bool
	// after checks the repaired store beyond a clean check.
	after func(fx *fixture)
}

var corruptions = []corruption{
	{
		name: "address held by two handles (block names one)",
		corrupt: func(fx *fixture) []string {
			a := fx.ip("net.a0.eth0")
			edit(fx, allocator.HandleKey("net.a1.eth0"), func(h *ipam.Handle) { h.IPs = append(h.IPs, a) })
			return []string{"duplicate-address " + a.Addr.String() + " net.a1.eth0"}
		},
		fixed: true,
		after: func(fx *fixture) {
			h, _, _ := fx.alloc.Handle(fx.ctx, "net.a1.eth0")
			if len(h.IPs) != 1 || h.IPs[0] != fx.ip("net.a1.eth0") {
				fx.t.Errorf("net.a1.eth0 after repair: %v, want only its own address", h.IPs)
			}
		},
	},
	{
		name: "address listed by two handles, block gives it to nobody",
		corrupt: func(fx *fixture) []string {
			a := fx.ip("net.a0.eth0")
			edit(fx, fx.blockKey("net.a0.eth0"), func(b *ipam.Block) {
				o := ordOf(*b, a.Addr)
				delete(b.Owners, o)
				b.Free = append(b.Free, o)
			})
			edit(fx, allocator.HandleKey("net.a1.eth0"), func(h *ipam.Handle) { h.IPs = append(h.IPs, a) })
			return []string{"duplicate-address " + a.Addr.String() + " net.a0.eth0,net.a1.eth0"}
		},
		fixed: false,
	},
	{
		name: "owner named by block has no record, another handle lists it",
		corrupt: func(fx *fixture) []string {
			a := fx.ip("net.a0.eth0")
			edit(fx, fx.blockKey("net.a0.eth0"), func(b *ipam.Block) { b.Owners[ordOf(*b, a.Addr)] = "gone.x.eth0" })
			edit(fx, allocator.HandleKey("net.a1.eth0"), func(h *ipam.Handle) { h.IPs = append(h.IPs, a) })
			fx.del(allocator.HandleKey("net.a0.eth0"))
			return []string{"duplicate-address " + a.Addr.String() + " net.a1.eth0"}
		},
		fixed: true,
		after: func(fx *fixture) {
			_, b, _ := fx.alloc.Block(fx.ctx, fx.ip("net.a0.eth0").Block)
			if got := b.Owner(fx.ip("net.a0.eth0").Addr); got != "net.a1.eth0" {
				fx.t.Errorf("owner after repair = %q, want net.a1.eth0", got)
			}
		},
	},
	{
		name: "handle lists an address its block has free",
		corrupt: func(fx *fixture) []string {
			a := fx.ip("net.a1.eth0")
			edit(fx, fx.blockKey("net.a1.eth0"), func(b *ipam.Block) {
				o := ordOf(*b, a.Addr)
				delete(b.Owners, o)
				b.Free = append([]int{o}, b.Free...) // next in line: the worst case
			})
			return []string{"handle-address-not-in-block " + a.Addr.String() + " net.a1.eth0"}
		},
		fixed: true,
		after: func(fx *fixture) {
			h := fx.allocate("net.new.eth0", "node-a")
			if h.IPs[0].Addr == fx.ip("net.a1.eth0").Addr {
				fx.t.Errorf("repaired address %s handed out again", h.IPs[0].Addr)
			}
		},
	},
	{
		name: "handles point into a block that does not exist",
		corrupt: func(fx *fixture) []string {
			ip := fx.ip("net.b0.eth0")
			fx.del(fx.blockKey("net.b0.eth0"))
			fx.del(allocator.AffinityKey("node-b", ip.Pool, ip.Block))
			return []string{"handle-address-not-in-block " + ip.Addr.String() + " net.b0.eth0"}
		},
		fixed: true,
		after: func(fx *fixture) {
			ip := fx.ip("net.b0.eth0")
			_, b, err := fx.alloc.Block(fx.ctx, ip.Block)
			if err != nil || b.Owner(ip.Addr) != "net.b0.eth0" || b.Node != "node-b" {
				fx.t.Errorf("recreated block: %+v, %v", b, err)
			}
		},
	},
	{
		name: "handle names a pool that does not exist",
		corrupt: func(fx *fixture) []string {
			edit(fx, allocator.HandleKey("net.a2.eth0"), func(h *ipam.Handle) {
				h.IPs = append(h.IPs, ipam.HandleIP{Addr: netip.MustParseAddr("192.0.2.7"), Pool: "gone", Block: netip.MustParsePrefix("192.0.2.0/28")})
			})
			return []string{"handle-address-not-in-block 192.0.2.7 net.a2.eth0"}
		},
		fixed: true,
	},
	{
		name: "handle names the wrong block",
		corrupt: func(fx *fixture) []string {
			ip := fx.ip("net.a2.eth0")
			other := fx.pool.BlockAt(7)
			edit(fx, allocator.HandleKey("net.a2.eth0"), func(h *ipam.Handle) { h.IPs[0].Block = other })
			return []string{"handle-address-not-in-block " + ip.Addr.String() + " net.a2.eth0"}
		},
		fixed: true,
		after: func(fx *fixture) {
			if _, err := fx.alloc.Release(fx.ctx, "net.a2.eth0"); err != nil {
				fx.t.Fatal(err)
			}
			_, b, _ := fx.alloc.Block(fx.ctx, fx.ip("net.a2.eth0").Block)
			if o := b.Owner(fx.ip("net.a2.eth0").Addr); o != "" {
				fx.t.Errorf("release after repair left the address with %q", o)
			}
		},
	},
	{
		name: "allocated address without a handle",
		corrupt: func(fx *fixture) []string {
			fx.del(allocator.HandleKey("net.a0.eth0"))
			return []string{"address-without-handle " + fx.ip("net.a0.eth0").Addr.String() + " net.a0.eth0"}
		},
		fixed: true,
		after: func(fx *fixture) {
			h, ok, _ := fx.alloc.Handle(fx.ctx, "net.a0.eth0")
			if !ok || h.Network != "net" || h.ContainerID != "a0" || h.IfName != "eth0" || h.Node != "node-a" {
				fx.t.Errorf("recreated handle = %+v", h)
			}
			freed, err := fx.alloc.Release(fx.ctx, "net.a0.eth0")
			if err != nil || len(freed) != 1 {
				fx.t.Errorf("release of recreated handle freed %v, %v", freed, err)
			}
		},
	},
	{
		name: "allocated address its handle does not list",
		corrupt: func(fx *fixture) []string {
			a := fx.ip("net.a2.eth0").Addr
			fx.del(allocator.HandleKey("net.a2.eth0"))
			edit(fx, fx.blockKey("net.a2.eth0"), func(b *ipam.Block) { b.Owners[ordOf(*b, a)] = "net.a1.eth0" })
			return []string{"address-without-handle " + a.String() + " net.a1.eth0"}
		},
		fixed: true,
		after: func(fx *fixture) {
			if h, _, _ := fx.alloc.Handle(fx.ctx, "net.a1.eth0"); len(h.IPs) != 2 {
				fx.t.Errorf("net.a1.eth0 after repair lists %v, want 2 addresses", h.IPs)
			}
		},
	},
	{
		name: "address allocated to an empty handle name",
		corrupt: func(fx *fixture) []string {
			a := fx.ip("net.a0.eth0").Addr
			edit(fx, fx.blockKey("net.a0.eth0"), func(b *ipam.Block) { b.Owners[ordOf(*b, a)] = "" })
			fx.del(allocator.HandleKey("net.a0.eth0"))
			return []string{"address-without-handle " + a.String()}
		},
		fixed: true,
		after: func(fx *fixture) {
			a := fx.ip("net.a0.eth0").Addr
			if _, ok, _ := fx.alloc.Handle(fx.ctx, "repair.unknown."+a.String()); !ok {
				fx.t.Error("no synthetic handle after repair")
			}
		},
	},
	{
		name: "handle without addresses",
		corrupt: func(fx *fixture) []string {
			fx.put(allocator.HandleKey("net.empty.eth0"), ipam.Handle{ID: "net.empty.eth0", Node: "node-a"})
			return []string{"handle-without-addresses  net.empty.eth0"}
		},
		fixed: true,
	},
	{
		name: "block affine to a node without its affinity record",
		corrupt: func(fx *fixture) []string {
			ip := fx.ip("net.b0.eth0")
			fx.del(allocator.AffinityKey("node-b", ip.Pool, ip.Block))
			return []string{"block-without-affinity"}
		},
		fixed: true,
		after: func(fx *fixture) {
			// node-b allocates from its block again instead of claiming another.
			h := fx.allocate("net.b1.eth0", "node-b")
			if h.IPs[0].Block != fx.ip("net.b0.eth0").Block {
				fx.t.Errorf("node-b allocated from %s, want its block %s", h.IPs[0].Block, fx.ip("net.b0.eth0").Block)
			}
		},
	},
	{
		name: "affinity record without its block",
		corrupt: func(fx *fixture) []string {
			fx.put(allocator.AffinityKey("node-c", fx.pool.Name, fx.pool.BlockAt(9)), []byte(allocator.BlockKey(fx.pool.Name, fx.pool.BlockAt(9))))
			return []string{"affinity-without-block"}
		},
		fixed: true,
	},
	{
		name: "affinity record for another node's block",
		corrupt: func(fx *fixture) []string {
			ip := fx.ip("net.a0.eth0")
			fx.put(allocator.AffinityKey("node-b", ip.Pool, ip.Block), []byte(fx.blockKey("net.a0.eth0")))
			return []string{"affinity-without-block"}
		},
		fixed: true,
	},
	{
		name: "address twice in the free queue",
		corrupt: func(fx *fixture) []string {
			var a netip.Addr
			edit(fx, fx.blockKey("net.a0.eth0"), func(b *ipam.Block) {
				a = b.Addr(b.Free[0])
				b.Free = append(b.Free, b.Free[0])
			})
			return []string{"count-mismatch " + a.String()}
		},
		fixed: true,
	},
	{
		name: "address both free and allocated",
		corrupt: func(fx *fixture) []string {
			a := fx.ip("net.a1.eth0")
			edit(fx, fx.blockKey("net.a1.eth0"), func(b *ipam.Block) { b.Free = append([]int{ordOf(*b, a.Addr)}, b.Free...) })
			return []string{"count-mismatch " + a.Addr.String() + " net.a1.eth0"}
		},
		fixed: true,
		after: func(fx *fixture) {
			if h := fx.allocate("net.new.eth0", "node-a"); h.IPs[0].Addr == fx.ip("net.a1.eth0").Addr {
				fx.t.Error("address held by net.a1.eth0 handed out again")
			}
		},
	},
	{
		name: "address neither free nor allocated",
		corrupt: func(fx *fixture) []string {
			var a netip.Addr
			edit(fx, fx.blockKey("net.a0.eth0"), func(b *ipam.Block) {
				a = b.Addr(b.Free[len(b.Free)-1])
				b.Free = b.Free[:len(b.Free)-1]
			})
			return []string{"count-mismatch " + a.String()}
		},
		fixed: true,
	},
	{
		name: "free ordinal and allocation outside the block",
		corrupt: func(fx *fixture) []string {
			edit(fx, fx.blockKey("net.a0.eth0"), func(b *ipam.Block) {
				b.Free = append(b.Free, 1000)
				b.Owners[-1] = "net.x.eth0"
			})
			return []string{"count-mismatch", "count-mismatch  net.x.eth0"}
		},
		fixed: true,
	},
	{
		name: "block of a pool that does not exist",
		corrupt: func(fx *fixture) []string {
			cidr := netip.MustParsePrefix("192.0.2.0/28")
			fx.put(allocator.BlockKey("gone", cidr), ipam.NewBlock(ipam.Pool{Name: "gone"}, cidr, ""))
			return []string{"block-without-pool"}
		},
		fixed: false,
	},
	{
		name: "undecodable handle",
		corrupt: func(fx *fixture) []string {
			fx.put(allocator.HandleKey("net.junk.eth0"), []byte("{not json"))
			return []string{"corrupt-value"}
		},
		fixed: false,
	},
	{
		name: "block stored under another key",
		corrupt: func(fx *fixture) []string {
			edit(fx, fx.blockKey("net.a0.eth0"), func(b *ipam.Block) { b.Pool = "other" })
			return []string{"key-mismatch"}
		},
		fixed: false,
	},
}

func TestCheckFindsExactlyTheCorruption(t *testing.T) {
	for _, f := range families {
		for _, c := range corruptions {
			t.Run(f.name+"/"+c.name, func(t *testing.T) {
				fx := newFixture(t, f)
				if r := fx.check(); len(r.Problems) != 0 {
					t.Fatalf("fresh store has problems: %v", brief(r.Problems))
				}
				want := c.corrupt(fx)
				before := fx.dump()
				r := fx.check()
				if got := brief(r.Problems); !slices.Equal(got, want) {
					t.Fatalf("check found\n  %q\nwant\n  %q\nproblems: %+v", got, want, r.Problems)
				}
				if fx.dump() != before {
					t.Fatal("check wrote to the store")
				}
				for _, p := range r.Problems {
					if p.Repairable != c.fixed || p.Detail == "" {
						t.Errorf("problem %+v: repairable=%v detail=%q, want repairable=%v and a detail", p, p.Repairable, p.Detail, c.fixed)
					}
				}

				res, err := Repair(fx.ctx, fx.store)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(brief(res.Found), want) {
					t.Errorf("repair found %q, want %q", brief(res.Found), want)
				}
				after := fx.check()
				if !slices.Equal(brief(after.Problems), brief(res.Remaining)) {
					t.Errorf("repair says %q remain, check finds %q", brief(res.Remaining), brief(after.Problems))
				}
				if c.fixed {
					if len(after.Problems) != 0 {
						t.Fatalf("after repair: %+v (actions %+v)", after.Problems, res.Actions)
					}
					if len(res.Actions) == 0 {
						t.Error("repair reported no action")
					}
				} else {
					if !slices.Equal(brief(after.Problems), want) {
						t.Errorf("unrepairable problems after repair = %q, want %q", brief(after.Problems), want)
					}
					if len(res.Actions) != 0 {
						t.Errorf("repair acted on an unrepairable problem: %+v", res.Actions)
					}
				}
				if c.after != nil {
					c.after(fx)
				}
			})
		}
	}
}
