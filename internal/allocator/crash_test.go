package allocator_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/storetest"
)

var errCrash = errors.New("process killed")

// crashing passes calls to a real store until its crash-th write; that
// write and every later one fail without reaching the store, as if the
// process had been killed just before sending it.
type crashing struct {
	store.Store
	crash  int64
	writes atomic.Int64
}

func (c *crashing) dead() bool { return c.writes.Add(1) >= c.crash }

func (c *crashing) CreatePool(ctx context.Context, p store.Pool) (store.Pool, error) {
	if c.dead() {
		return store.Pool{}, errCrash
	}
	return c.Store.CreatePool(ctx, p)
}

func (c *crashing) CreateClaim(ctx context.Context, cl store.Claim) (store.Claim, error) {
	if c.dead() {
		return store.Claim{}, errCrash
	}
	return c.Store.CreateClaim(ctx, cl)
}

func (c *crashing) DeleteClaim(ctx context.Context, cl store.Claim) error {
	if c.dead() {
		return errCrash
	}
	return c.Store.DeleteClaim(ctx, cl)
}

func (c *crashing) CreateNode(ctx context.Context, n store.Node) (store.Node, error) {
	if c.dead() {
		return store.Node{}, errCrash
	}
	return c.Store.CreateNode(ctx, n)
}

func (c *crashing) UpdateNode(ctx context.Context, n store.Node) (store.Node, error) {
	if c.dead() {
		return store.Node{}, errCrash
	}
	return c.Store.UpdateNode(ctx, n)
}

func (c *crashing) DeleteNode(ctx context.Context, n store.Node) error {
	if c.dead() {
		return errCrash
	}
	return c.Store.DeleteNode(ctx, n)
}

// TestCrashPoints kills an ADD (and a DEL) before each of its writes
// in turn — the crash points of docs/STORAGE.md — in every shape an
// allocation takes: the node's own block, a new claim, a borrowed address,
// a dual-stack handle with one family borrowed, a requested address in
// another node's block. After each crash: no address has two holders;
// the runtime's DEL of the killed ADD (what a kubelet does after a failed
// ADD) leaves nothing of it; an ADD again succeeds with addresses of its
// own; and the other handles are untouched.
func TestCrashPoints(t *testing.T) {
	small := ipam.Pool{Name: "small", CIDR: netip.MustParsePrefix("10.8.0.0/27"), BlockSize: 28}
	scenarios := []struct {
		name  string
		setup func(t *testing.T, a prefixed) // on node-a and node-b
		req   allocator.Request              // node-c's ADD
	}{
		{"own block", func(t *testing.T, a prefixed) { mustAdd(t, a, podRequest("node-c", "first", "v6")) }, podRequest("node-c", "x", "v6")},
		{"new claim, dual-stack", nil, podRequest("node-c", "x", "v4", "v6")},
		{"borrowed", fillSmall, podRequest("node-c", "x", "small")},
		{"dual-stack, IPv4 borrowed", fillSmall, podRequest("node-c", "x", "small", "v6")},
		{"requested in another node's block", func(t *testing.T, a prefixed) { mustAdd(t, a, podRequest("node-a", "a", "v4")) },
			withWant(podRequest("node-c", "x", "v4"), "10.9.0.9")},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			storeBackends(t, func(t *testing.T, s store.Store) {
				for crash := int64(1); ; crash++ {
					if crash > 20 {
						t.Fatal("the ADD kept writing past 20 writes")
					}
					prefix := fmt.Sprintf("k%d-", crash)
					pools := []ipam.Pool{renamed(small, prefix), renamed(v4Pool, prefix), renamed(v6Pool, prefix)}
					a := newAllocator(t, s, pools...)
					if sc.setup != nil {
						sc.setup(t, prefixed{a, prefix})
					}
					before := storetest.Holders(t, s)
					req := prefixReq(sc.req, prefix)
					c := &crashing{Store: s, crash: crash}
					_, err := allocator.New(c, nil).Allocate(t.Context(), req)
					if err == nil {
						// No crash point left: the ADD wrote everything.
						if crash == 1 {
							t.Fatal("an ADD that writes nothing")
						}
						t.Logf("%d crash points", crash-1)
						return
					}
					if !errors.Is(err, errCrash) {
						t.Fatalf("crash at write %d: %v", crash, err)
					}
					after := storetest.Holders(t, s)
					for addr, id := range before {
						if after[addr] != id {
							t.Fatalf("crash at write %d: %s of %s became %q", crash, addr, id, after[addr])
						}
					}
					fresh := allocator.New(s, nil)
					if _, err := fresh.Release(t.Context(), req.Handle.Node, req.Handle.ID); err != nil {
						t.Fatalf("crash at write %d: the runtime's DEL: %v", crash, err)
					}
					if left := storetest.Holders(t, s); len(left) != len(before) {
						t.Fatalf("crash at write %d: after the DEL %d addresses are held, %d before the ADD", crash, len(left), len(before))
					}
					for _, l := range loans(t, s) {
						t.Fatalf("crash at write %d: after the DEL a loan remains: %s", crash, l)
					}
					h, err := fresh.Allocate(t.Context(), req)
					if err != nil || len(h.IPs) != len(req.Sets) {
						t.Fatalf("crash at write %d: ADD again = %+v, %v", crash, h, err)
					}
					if got := storetest.Holders(t, s); len(got) != len(before)+len(h.IPs) {
						t.Fatalf("crash at write %d: ADD again holds %d, want %d", crash, len(got), len(before)+len(h.IPs))
					}
					// The DEL of a borrowed handle, killed before each write.
					for dcrash := int64(1); dcrash <= 4; dcrash++ {
						c := &crashing{Store: s, crash: dcrash}
						if _, err := allocator.New(c, nil).Release(t.Context(), req.Handle.Node, req.Handle.ID); err == nil {
							break
						}
						if got := storetest.Holders(t, s); len(got) < len(before) {
							t.Fatalf("a killed DEL freed another handle's address")
						}
					}
					if _, err := fresh.Release(t.Context(), req.Handle.Node, req.Handle.ID); err != nil {
						t.Fatal(err)
					}
					if got := storetest.Holders(t, s); len(got) != len(before) || len(loans(t, s)) != 0 {
						t.Fatalf("crash at write %d: the DEL after killed DELs left %d addresses (want %d) and loans %q", crash, len(got), len(before), loans(t, s))
					}
					cleanup(t, s, prefixed{fresh, prefix})
				}
			})
		})
	}
}

// prefixed is an allocator whose pool names carry a prefix, so that each
// crash point runs on pools of its own in one store.
type prefixed struct {
	*allocator.Allocator
	prefix string
}

func renamed(p ipam.Pool, prefix string) ipam.Pool {
	p.Name = prefix + p.Name
	return p
}

func prefixReq(r allocator.Request, prefix string) allocator.Request {
	out := r
	out.Sets = nil
	for _, set := range r.Sets {
		var s []string
		for _, n := range set {
			s = append(s, prefix+n)
		}
		out.Sets = append(out.Sets, s)
	}
	out.Handle.ID = ipam.HandleID("net", prefix+r.Handle.ContainerID, "eth0")
	out.Handle.ContainerID = prefix + r.Handle.ContainerID
	return out
}

func withWant(r allocator.Request, addr string) allocator.Request {
	r.Want = []netip.Addr{netip.MustParseAddr(addr)}
	return r
}

func mustAdd(t *testing.T, a prefixed, r allocator.Request) {
	t.Helper()
	if _, err := a.Allocate(t.Context(), prefixReq(r, a.prefix)); err != nil {
		t.Fatal(err)
	}
}

// fillSmall claims both blocks of the small pool on node-a and node-b.
func fillSmall(t *testing.T, a prefixed) {
	t.Helper()
	for _, node := range []string{"node-a", "node-b"} {
		mustAdd(t, a, podRequest(node, node, "small"))
	}
}

// cleanup releases every handle of the prefix's pools.
func cleanup(t *testing.T, s store.Store, a prefixed) {
	t.Helper()
	if _, err := a.ReleaseHandles(t.Context(), func(ipam.Handle) bool { return true }); err != nil {
		t.Fatal(err)
	}
	if n := len(storetest.Holders(t, s)); n != 0 {
		t.Fatalf("%d addresses held after cleanup", n)
	}
}
