package allocator_test

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/nodealloc"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/storetest"
)

func TestAllocateClaimsAndOneWrite(t *testing.T) {
	cases := []struct {
		name  string
		pool  ipam.Pool
		first []string // the first addresses node-a gets
	}{
		{"IPv4", v4Pool, []string{"10.9.0.2", "10.9.0.3"}},
		{"IPv6", v6Pool, []string{"fd00:9::1", "fd00:9::2"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			storeBackends(t, func(t *testing.T, s store.Store) {
				cs := &counted{Store: s}
				a := newAllocator(t, cs, c.pool)
				var got []string
				for i := range 2 {
					h, err := a.Allocate(t.Context(), podRequest("node-a", fmt.Sprint("a", i), c.pool.Name))
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, h.IPs[0].Addr.String())
				}
				if !slices.Equal(got, c.first) {
					t.Fatalf("node-a got %v, want %v", got, c.first)
				}
				// Warm: the node's block has room, so an ADD is one write
				// and no read.
				r0, w0 := cs.reads.Load(), cs.writes.Load()
				if _, err := a.Allocate(t.Context(), podRequest("node-a", "a2", c.pool.Name)); err != nil {
					t.Fatal(err)
				}
				if r, w := cs.reads.Load()-r0, cs.writes.Load()-w0; r != 0 || w != 1 {
					t.Fatalf("a warm ADD made %d reads and %d writes, want 1 write and no read", r, w)
				}
				hb, err := a.Allocate(t.Context(), podRequest("node-b", "b0", c.pool.Name))
				if err != nil {
					t.Fatal(err)
				}
				if hb.IPs[0].Block == c.pool.BlockAt(0) {
					t.Fatalf("node-b allocated %s in node-a's block", hb.IPs[0].Addr)
				}
				claims, err := s.ListClaims(t.Context(), store.ClaimSelector{Node: "node-b"})
				if err != nil || len(claims) != 1 || claims[0].CIDR != hb.IPs[0].Block {
					t.Fatalf("node-b's claims = %+v, %v; want one of %s", claims, err, hb.IPs[0].Block)
				}
				if n := len(storetest.Holders(t, s)); n != 4 {
					t.Fatalf("%d addresses held, want 4", n)
				}
			})
		})
	}
}

func TestAllocateDualStack(t *testing.T) {
	storeBackends(t, func(t *testing.T, s store.Store) {
		cs := &counted{Store: s}
		a := newAllocator(t, cs, v4Pool, v6Pool)
		if _, err := a.Allocate(t.Context(), podRequest("node-a", "c0", "v4", "v6")); err != nil {
			t.Fatal(err)
		}
		r0, w0 := cs.reads.Load(), cs.writes.Load()
		h, err := a.Allocate(t.Context(), podRequest("node-a", "c1", "v4", "v6"))
		if err != nil {
			t.Fatal(err)
		}
		if r, w := cs.reads.Load()-r0, cs.writes.Load()-w0; r != 0 || w != 1 {
			t.Fatalf("a warm dual-stack ADD made %d reads and %d writes, want 1 write and no read", r, w)
		}
		if len(h.IPs) != 2 || !h.IPs[0].Addr.Is4() || !h.IPs[1].Addr.Is6() {
			t.Fatalf("dual-stack ADD = %+v", h.IPs)
		}
		// Idempotent, from this allocator and from a fresh one.
		for _, al := range []*allocator.Allocator{a, allocator.New(s, nil)} {
			again, err := al.Allocate(t.Context(), podRequest("node-a", "c1", "v4", "v6"))
			if err != nil || !slices.Equal(again.IPs, h.IPs) {
				t.Fatalf("repeated ADD = %+v, %v; want %+v", again.IPs, err, h.IPs)
			}
		}
		w0 = cs.writes.Load()
		freed, err := a.Release(t.Context(), "node-a", h.ID)
		if err != nil || len(freed) != 2 {
			t.Fatalf("Release = %v, %v", freed, err)
		}
		if w := cs.writes.Load() - w0; w != 1 {
			t.Fatalf("a dual-stack DEL made %d writes, want 1", w)
		}
		if freed, err := a.Release(t.Context(), "node-a", h.ID); err != nil || len(freed) != 0 {
			t.Fatalf("second Release = %v, %v; want nothing", freed, err)
		}
	})
}

// TestBorrowAndStrict: a node with no block left to claim borrows
// from another node's block (a loan in its object, the record in the
// lender's), unless the pool is strict; releasing frees the lender's
// address and drops the loan.
func TestBorrowAndStrict(t *testing.T) {
	small4 := ipam.Pool{Name: "small4", CIDR: netip.MustParsePrefix("10.8.0.0/27"), BlockSize: 28}
	small6 := ipam.Pool{Name: "small6", CIDR: netip.MustParsePrefix("fd00:8::/123"), BlockSize: 124}
	for _, p := range []ipam.Pool{small4, small6} {
		t.Run(p.Name, func(t *testing.T) {
			storeBackends(t, func(t *testing.T, s store.Store) {
				a := newAllocator(t, s, p)
				for _, node := range []string{"node-a", "node-b"} {
					if _, err := a.Allocate(t.Context(), podRequest(node, node+"-0", p.Name)); err != nil {
						t.Fatal(err)
					}
				}
				h, err := a.Allocate(t.Context(), podRequest("node-c", "c0", p.Name))
				if err != nil {
					t.Fatal(err)
				}
				if l := loans(t, s); len(l) != 1 || l[0] != "node-c:"+h.ID+"->node-a" {
					t.Fatalf("loans = %q, want node-c's handle borrowing from node-a", l)
				}
				got, ok, err := a.Handle(t.Context(), "node-c", h.ID)
				if err != nil || !ok || !slices.Equal(got.IPs, h.IPs) {
					t.Fatalf("Handle = %+v, %v, %v; want %+v", got, ok, err, h)
				}
				if again, err := allocator.New(s, nil).Allocate(t.Context(), podRequest("node-c", "c0", p.Name)); err != nil || !slices.Equal(again.IPs, h.IPs) {
					t.Fatalf("repeated borrowed ADD = %+v, %v", again, err)
				}
				if freed, err := a.Release(t.Context(), "node-c", h.ID); err != nil || len(freed) != 1 || freed[0] != h.IPs[0].Addr {
					t.Fatalf("Release = %v, %v", freed, err)
				}
				if l := loans(t, s); len(l) != 0 {
					t.Fatalf("loans after release = %q", l)
				}
				if _, held := storetest.Holders(t, s)[h.IPs[0].Addr]; held {
					t.Fatalf("%s still held after release", h.IPs[0].Addr)
				}
				strict := p
				strict.Name += "-strict"
				strict.StrictAffinity = true
				sa := newAllocator(t, s, strict)
				for _, node := range []string{"node-a", "node-b"} {
					if _, err := sa.Allocate(t.Context(), podRequest(node, node+"-s", strict.Name)); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := sa.Allocate(t.Context(), podRequest("node-c", "cs", strict.Name)); !errors.Is(err, allocator.ErrExhausted) {
					t.Fatalf("strict pool with every block claimed: %v, want ErrExhausted", err)
				}
			})
		})
	}
}

func TestAllocateWanted(t *testing.T) {
	storeBackends(t, func(t *testing.T, s store.Store) {
		a := newAllocator(t, s, v4Pool, v6Pool)
		ctx := t.Context()
		if _, err := a.Allocate(ctx, podRequest("node-a", "a0", "v4")); err != nil {
			t.Fatal(err)
		}
		cases := []struct {
			name, node, want string
			err              error
		}{
			{"own block, IPv4", "node-a", "10.9.0.9", nil},
			{"unclaimed block, IPv6", "node-a", "fd00:9::77", nil},
			{"another node's block, IPv4", "node-b", "10.9.0.10", nil},
			{"taken, IPv4", "node-b", "10.9.0.9", allocator.ErrAddrUnavailable},
			{"gateway, IPv4", "node-c", "10.9.0.1", allocator.ErrAddrUnavailable},
			{"taken, IPv6", "node-b", "fd00:9::77", allocator.ErrAddrUnavailable},
		}
		for i, c := range cases {
			pool := "v4"
			if netip.MustParseAddr(c.want).Is6() {
				pool = "v6"
			}
			req := podRequest(c.node, fmt.Sprint("w", i), pool)
			req.Want = []netip.Addr{netip.MustParseAddr(c.want)}
			h, err := a.Allocate(ctx, req)
			if c.err != nil {
				if !errors.Is(err, c.err) {
					t.Fatalf("%s: %v, want %v", c.name, err, c.err)
				}
				continue
			}
			if err != nil || h.IPs[0].Addr != req.Want[0] {
				t.Fatalf("%s: %+v, %v", c.name, h.IPs, err)
			}
		}
		if l := loans(t, s); len(l) != 1 {
			t.Fatalf("loans = %q, want node-b's request in node-a's block", l)
		}
		storetest.Holders(t, s)
	})
}

func TestAllocateNoPool(t *testing.T) {
	storeBackends(t, func(t *testing.T, s store.Store) {
		sel := v4Pool
		sel.Name, sel.NodeSelector = "selective", "zone == a"
		off := v6Pool
		off.Name, off.Disabled = "off", true
		a := newAllocator(t, s, sel, off)
		if _, err := a.Allocate(t.Context(), podRequest("node-b", "x", "selective")); !errors.Is(err, allocator.ErrNoPool) {
			t.Fatalf("pool selecting other nodes: %v, want ErrNoPool", err)
		}
		if _, err := a.Allocate(t.Context(), podRequest("node-b", "x", "off")); !errors.Is(err, allocator.ErrNoPool) {
			t.Fatalf("disabled pool: %v, want ErrNoPool", err)
		}
		if _, err := a.Allocate(t.Context(), podRequest("node-b", "x", "missing")); !errors.Is(err, allocator.ErrPoolNotFound) {
			t.Fatalf("missing pool: %v, want ErrPoolNotFound", err)
		}
		req := podRequest("node-a", "x", "selective")
		req.Labels = map[string]string{"zone": "a"}
		if _, err := a.Allocate(t.Context(), req); err != nil {
			t.Fatalf("selected node: %v", err)
		}
		if n := len(storetest.Holders(t, s)); n != 1 {
			t.Fatalf("%d addresses held, want 1", n)
		}
	})
}

// TestAllocateExhausted fills a pool (bounded: it has 30 usable
// addresses) and expects ErrExhausted with nothing left behind.
func TestAllocateExhausted(t *testing.T) {
	tiny := ipam.Pool{Name: "tiny", CIDR: netip.MustParsePrefix("10.7.0.0/27"), BlockSize: 28}
	storeBackends(t, func(t *testing.T, s store.Store) {
		a := newAllocator(t, s, tiny)
		var err error
		n := 0
		for ; n < 64; n++ {
			if _, err = a.Allocate(t.Context(), podRequest(fmt.Sprint("node-", n%3), fmt.Sprint("c", n), "tiny")); err != nil {
				break
			}
		}
		if !errors.Is(err, allocator.ErrExhausted) || n != 30 {
			t.Fatalf("after %d allocations: %v, want ErrExhausted after 30", n, err)
		}
		if got := len(storetest.Holders(t, s)); got != 30 {
			t.Fatalf("%d held, want 30", got)
		}
	})
}

// TestFailedAddLeavesNothing: when a write after the node's own one
// fails (the lender's), the allocation is undone.
func TestFailedAddLeavesNothing(t *testing.T) {
	small := ipam.Pool{Name: "small", CIDR: netip.MustParsePrefix("10.8.0.0/27"), BlockSize: 28}
	storeBackends(t, func(t *testing.T, s store.Store) {
		cs := &counted{Store: s}
		a := newAllocator(t, cs, small)
		for _, node := range []string{"node-a", "node-b"} {
			if _, err := a.Allocate(t.Context(), podRequest(node, node, "small")); err != nil {
				t.Fatal(err)
			}
		}
		before := storetest.Holders(t, s)
		cs.failWrite = func(kind string, n store.Node) error {
			if n.Name != "node-c" && kind == "update" {
				return fmt.Errorf("%w: %w", store.ErrUnavailable, errInjected)
			}
			return nil
		}
		if _, err := a.Allocate(t.Context(), podRequest("node-c", "c0", "small")); !errors.Is(err, errInjected) {
			t.Fatalf("ADD with the lender's write failing = %v", err)
		}
		cs.failWrite = nil
		if after := storetest.Holders(t, s); len(after) != len(before) {
			t.Fatalf("a failed ADD left addresses: %v", after)
		}
		if l := loans(t, s); len(l) != 0 {
			t.Fatalf("a failed ADD left loans: %q", l)
		}
	})
}

func TestEnsurePoolConflict(t *testing.T) {
	storeBackends(t, func(t *testing.T, s store.Store) {
		a := newAllocator(t, s, v4Pool)
		other := v4Pool
		other.CIDR = netip.MustParsePrefix("10.10.0.0/24")
		other.Gateway = netip.Addr{}
		if _, err := a.EnsurePool(t.Context(), other); !errors.Is(err, allocator.ErrPoolConflict) {
			t.Fatalf("EnsurePool with another definition: %v", err)
		}
		req := podRequest("node-a", "c", "v4")
		req.Define = []ipam.Pool{other}
		if _, err := a.Allocate(t.Context(), req); !errors.Is(err, allocator.ErrPoolConflict) {
			t.Fatalf("ADD defining a conflicting pool: %v", err)
		}
		if p, err := a.Pool(t.Context(), "v4"); err != nil || p.CIDR != v4Pool.CIDR {
			t.Fatalf("pool after refused definitions: %+v, %v", p, err)
		}
	})
}

// TestReleaseReportsEveryAttempt: a DEL that frees a lender's part,
// then conflicts on its own object and retries, still reports the
// lender's address among those it freed.
func TestReleaseReportsEveryAttempt(t *testing.T) {
	small := ipam.Pool{Name: "small", CIDR: netip.MustParsePrefix("10.8.0.0/27"), BlockSize: 28}
	storeBackends(t, func(t *testing.T, s store.Store) {
		cs := &counted{Store: s}
		a := newAllocator(t, cs, small, v6Pool)
		for _, node := range []string{"node-a", "node-b"} {
			if _, err := a.Allocate(t.Context(), podRequest(node, node, "small")); err != nil {
				t.Fatal(err)
			}
		}
		h, err := a.Allocate(t.Context(), podRequest("node-c", "c", "small", "v6"))
		if err != nil {
			t.Fatal(err)
		}
		conflicted := false
		cs.failWrite = func(kind string, n store.Node) error {
			if n.Name == "node-c" && !conflicted {
				conflicted = true
				return fmt.Errorf("injected: %w", store.ErrConflict)
			}
			return nil
		}
		freed, err := a.Release(t.Context(), "node-c", h.ID)
		if err != nil || !conflicted {
			t.Fatalf("Release = %v (conflict injected: %v)", err, conflicted)
		}
		if !slices.Equal(sortedAddrList(freed), sortedAddrs(h.IPs)) {
			t.Fatalf("Release reported %v, the handle held %v", freed, h.IPs)
		}
	})
}

func sortedAddrList(as []netip.Addr) []netip.Addr {
	out := slices.Clone(as)
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// TestReleaseUnaffine: an allocation imported without a node (as
// whereabouts records none) lives in store.UnaffineNode's object; the
// runtime's DEL from the pod's real node frees it.
func TestReleaseUnaffine(t *testing.T) {
	storeBackends(t, func(t *testing.T, s store.Store) {
		a := newAllocator(t, s, v4Pool)
		n := nodealloc.AddBlock(store.Node{Name: store.UnaffineNode}, v4Pool, v4Pool.BlockAt(2))
		h := podRequest(store.UnaffineNode, "imported", "v4").Handle
		n, ip, err := nodealloc.Take(n, v4Pool, h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateNode(t.Context(), n); err != nil {
			t.Fatal(err)
		}
		freed, err := a.Release(t.Context(), "node-a", h.ID)
		if err != nil || len(freed) != 1 || freed[0] != ip.Addr {
			t.Fatalf("DEL from the pod's node = %v, %v; want %s", freed, err, ip.Addr)
		}
		if got := storetest.Holders(t, s); len(got) != 0 {
			t.Fatalf("still held: %v", got)
		}
		if freed, err := a.Release(t.Context(), "node-a", h.ID); err != nil || len(freed) != 0 {
			t.Fatalf("second DEL = %v, %v", freed, err)
		}
	})
}
