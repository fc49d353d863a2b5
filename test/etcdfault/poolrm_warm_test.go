package etcdfault

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/consistency"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// removalFamilies are the pools of the tests below: two blocks each.
var removalFamilies = []struct {
	name string
	pool ipam.Pool
}{
	{"v4", ipam.Pool{Name: "warm", CIDR: netip.MustParsePrefix("10.86.0.0/28"), BlockSize: 29, Origin: "cli"}},
	{"v6", ipam.Pool{Name: "warm", CIDR: netip.MustParsePrefix("fd86::/124"), BlockSize: 125, Origin: "cli"}},
}

// cachedPools is a store that also reads pools from a cache that may lag
// behind writes (the kubernetes datastore's, from the API server's watch
// cache).
type cachedPools interface {
	GetPoolCached(ctx context.Context, name string) (store.Pool, error)
}

// TestPoolRemovalWarmADD: a node that already holds a block of a pool with
// room (the warm path: no claim, no pool re-read) gets CNI 101 from an
// ADD once the pool is marked for removal ('pool rm' marks it first, and
// an interrupted one leaves it marked), saying how to finish or cancel,
// and the ADD changes nothing; once the removal is cancelled the same ADD
// succeeds. Through the plugin binary on the local store, etcd (the node's
// hint file in use) and the kubernetes datastore, IPv4 and IPv6.
func TestPoolRemovalWarmADD(t *testing.T) {
	for _, fam := range removalFamilies {
		for _, name := range backendNames {
			t.Run(fam.name+"/"+name, func(t *testing.T) {
				b := newBackend(t, name, "warm-"+fam.name)
				ctx := t.Context()
				pool := fam.pool
				withStore := func(f func(a *allocator.Allocator, s store.Store)) {
					t.Helper()
					s, err := datastore.Open(ctx, b.ds, datastore.Options{})
					if err != nil {
						t.Fatal(err)
					}
					defer s.Close()
					f(allocator.New(s, nil), s)
				}
				withStore(func(a *allocator.Allocator, _ store.Store) {
					if err := a.CreatePool(ctx, pool); err != nil {
						t.Fatal(err)
					}
				})
				lockDir := t.TempDir() // the node's: on etcd its hint file stays between calls
				conf := pluginConf(b.pluginDS, "node-new", pool.Name)
				o, err := runPlugin(ctx, t, "ADD", "c1", conf, lockDir)
				if err != nil || o.Code != 0 || len(o.IPs) != 1 || !pool.CIDR.Contains(o.IPs[0]) {
					t.Fatalf("first ADD: %+v, %v", o, err)
				}

				// Mark the pool as 'pool rm' does first; node-new's block
				// keeps room for more.
				var before consistency.Counts
				var nodeVersion store.Version
				withStore(func(_ *allocator.Allocator, s store.Store) {
					p, err := s.GetPool(ctx, pool.Name)
					if err != nil {
						t.Fatal(err)
					}
					p.Spec.Deleting = true
					if _, err := s.UpdatePool(ctx, p); err != nil {
						t.Fatal(err)
					}
					n, err := s.GetNode(ctx, "node-new")
					if err != nil || len(n.Blocks) != 1 || n.Blocks[0].FreeCount(pool) == 0 {
						t.Fatalf("node-new's object %+v (%v): want one block of %s with room", n, err, pool.Name)
					}
					nodeVersion = n.Version
					// The kubernetes plugin reads the pool from the API
					// server's watch cache: wait until that has the mark
					// (it never goes back), so that the ADD below is
					// decided on the mark, not on how fast a cache is.
					if c, ok := s.(cachedPools); ok {
						for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
							got, err := c.GetPoolCached(ctx, pool.Name)
							if err == nil && got.Spec.Deleting {
								break
							}
							if time.Now().After(deadline) {
								t.Fatalf("the watch cache does not show the mark: %+v, %v", got, err)
							}
						}
					}
					rep, err := consistency.CheckStore(ctx, s)
					if err != nil {
						t.Fatal(err)
					}
					before = rep.Counts
				})

				o, err = runPlugin(ctx, t, "ADD", "c2", conf, lockDir)
				if err != nil {
					t.Fatal(err)
				}
				for _, want := range []string{"being removed", "ipkeeperctl pool rm " + pool.Name, "ipkeeperctl pool rm --cancel " + pool.Name} {
					if o.Code != 101 || !strings.Contains(o.Msg, want) {
						t.Fatalf("warm ADD into a pool being removed: code %d %q (IPs %v), want 101 mentioning %q", o.Code, o.Msg, o.IPs, want)
					}
				}
				withStore(func(_ *allocator.Allocator, s store.Store) {
					rep, err := consistency.CheckStore(ctx, s)
					if err != nil {
						t.Fatal(err)
					}
					if rep.Counts != before {
						t.Fatalf("the refused ADD changed the store: %+v, before %+v", rep.Counts, before)
					}
					if n, err := s.GetNode(ctx, "node-new"); err != nil || n.Version != nodeVersion {
						t.Fatalf("the refused ADD wrote node-new's object: version %v (%v), before %v", n.Version, err, nodeVersion)
					}
				})

				if out, errs, code := ipkeeperctl(t, b.ds, "pool", "rm", "--cancel", pool.Name); code != 0 {
					t.Fatalf("pool rm --cancel: exit %d\n%s%s", code, out, errs)
				}
				if o, err := runPlugin(ctx, t, "ADD", "c2", conf, lockDir); err != nil || o.Code != 0 || len(o.IPs) != 1 || !pool.CIDR.Contains(o.IPs[0]) {
					t.Fatalf("ADD after the removal was cancelled: %+v, %v", o, err)
				}
			})
		}
	}
}

// markOnClaim is a real typed store that marks pool for removal right
// after a claim of one of its blocks is created: between an allocation's
// claim and its re-read of the pool, where a 'pool rm' that listed the
// claims just before the claim would have marked it.
type markOnClaim struct {
	store.Store
	t      *testing.T
	pool   string
	marked bool
}

func (m *markOnClaim) CreateClaim(ctx context.Context, c store.Claim) (store.Claim, error) {
	out, err := m.Store.CreateClaim(ctx, c)
	if err != nil || c.Pool != m.pool || m.marked {
		return out, err
	}
	p, err := m.Store.GetPool(ctx, m.pool)
	if err != nil {
		m.t.Errorf("marking the pool: %v", err)
		return out, nil
	}
	p.Spec.Deleting = true
	if _, err := m.Store.UpdatePool(ctx, p); err != nil {
		m.t.Errorf("marking the pool: %v", err)
	}
	m.marked = true
	return out, nil
}

// TestPoolMarkedBetweenClaimAndReread: a pool marked for removal after an
// allocation read it as usable and after that allocation claimed a block
// of it, but before the allocation read the pool again, fails the
// allocation as "being removed" (ErrNoPool: CNI 101), and the claim is
// returned: nothing of it is left but the mark. Deterministic (a store
// that marks the pool right after the claim), on the local store, etcd and
// the kubernetes datastore, IPv4 and IPv6.
func TestPoolMarkedBetweenClaimAndReread(t *testing.T) {
	for _, fam := range removalFamilies {
		for _, name := range backendNames {
			t.Run(fam.name+"/"+name, func(t *testing.T) {
				b := newBackend(t, name, "reread-"+fam.name)
				ctx := t.Context()
				pool := fam.pool
				s, err := datastore.Open(ctx, b.pluginDS, datastore.Options{})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				if err := allocator.New(s, nil).CreatePool(ctx, pool); err != nil {
					t.Fatal(err)
				}
				m := &markOnClaim{Store: s, t: t, pool: pool.Name}
				a := allocator.New(m, nil)
				_, err = a.Allocate(ctx, allocator.Request{
					Handle: ipam.Handle{ID: "net1.c1.eth0", Network: "net1", ContainerID: "c1", IfName: "eth0", Node: "node-new"},
					Sets:   [][]string{{pool.Name}}})
				if !m.marked {
					t.Fatal("setup: the allocation claimed no block, the pool was never marked")
				}
				if !errors.Is(err, allocator.ErrNoPool) || !strings.Contains(err.Error(), "being removed") {
					t.Fatalf("allocation whose pool was marked after its claim: %v, want ErrNoPool saying the pool is being removed", err)
				}
				if cs, err := s.ListClaims(ctx, store.ClaimSelector{Pool: pool.Name}); err != nil || len(cs) != 0 {
					t.Fatalf("claims of %s after the failed allocation: %+v, %v; want the claim returned", pool.Name, cs, err)
				}
				rep, err := consistency.CheckStore(ctx, s)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range rep.Problems {
					if p.Kind != consistency.KindPoolDeleting {
						t.Errorf("check: %+v", p)
					}
				}
				if rep.Counts.Handles != 0 || rep.Counts.Allocated != 0 {
					t.Fatalf("the failed allocation left %+v", rep.Counts)
				}
			})
		}
	}
}
