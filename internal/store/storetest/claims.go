package storetest

import (
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

func claimOf(pool string, cidr netip.Prefix, node string) store.Claim {
	return store.Claim{BlockRef: store.BlockRef{Pool: pool, CIDR: cidr}, Node: node}
}

func testClaimLifecycle(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			c := claimOf(f.pool.Name, f.pool.BlockAt(3), "node-a")
			_, err := s.GetClaim(ctx, c.BlockRef)
			wantErr(t, err, store.ErrNotFound, "GetClaim before create")
			created, err := s.CreateClaim(ctx, c)
			noErr(t, err, "CreateClaim")
			if created.Version == "" || created.BlockRef != c.BlockRef || created.Node != c.Node {
				t.Fatalf("CreateClaim returned %+v, want %+v with a version", created, c)
			}
			got, err := s.GetClaim(ctx, c.BlockRef)
			noErr(t, err, "GetClaim")
			if got != created {
				t.Fatalf("GetClaim = %+v, want %+v", got, created)
			}
			other := claimOf(f.pool.Name, f.pool.BlockAt(3), "node-b")
			_, err = s.CreateClaim(ctx, other)
			wantNoConflict(t, err, store.ErrExists, "CreateClaim of a claimed block by another node")
			if got, _ := s.GetClaim(ctx, c.BlockRef); got != created {
				t.Fatalf("a refused claim changed the stored one: %+v", got)
			}
			stale := created
			stale.Version = "1"
			if stale.Version == created.Version {
				stale.Version = "2"
			}
			wantErr(t, s.DeleteClaim(ctx, stale), store.ErrConflict, "DeleteClaim at a stale version")
			noErr(t, s.DeleteClaim(ctx, created), "DeleteClaim")
			_, err = s.GetClaim(ctx, c.BlockRef)
			wantErr(t, err, store.ErrNotFound, "GetClaim after delete")
			wantNoConflict(t, s.DeleteClaim(ctx, created), store.ErrNotFound, "DeleteClaim of a deleted claim")
			for _, sel := range []store.ClaimSelector{{Node: "node-a"}, {Pool: f.pool.Name}} {
				l, err := s.ListClaims(ctx, sel)
				noErr(t, err, "ListClaims")
				if len(l) != 0 {
					t.Fatalf("ListClaims(%+v) after delete = %+v", sel, l)
				}
			}
			// The block is free again: another node claims it.
			again, err := s.CreateClaim(ctx, other)
			noErr(t, err, "CreateClaim after delete")
			if again.Version == created.Version {
				t.Fatalf("a recreated claim has the deleted one's version %q", again.Version)
			}
		})
	}
}

// testClaimCreateRace: of concurrent claims of one block exactly one
// wins, and the stored claim is the winner's.
func testClaimCreateRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	const racers = 8
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			ref := store.BlockRef{Pool: f.pool.Name, CIDR: f.pool.BlockAt(7)}
			var (
				wg     sync.WaitGroup
				mu     sync.Mutex
				wins   []store.Claim
				errs   []error
				start  = make(chan struct{})
				others int
			)
			for i := range racers {
				wg.Go(func() {
					<-start
					c, err := s.CreateClaim(ctx, claimOf(ref.Pool, ref.CIDR, fmt.Sprintf("node-%d", i)))
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						wins = append(wins, c)
					case errors.Is(err, store.ErrExists):
						others++
					default:
						errs = append(errs, err)
					}
				})
			}
			close(start)
			wg.Wait()
			if len(errs) > 0 {
				t.Fatalf("CreateClaim errors other than ErrExists: %v", errs)
			}
			if len(wins) != 1 || others != racers-1 {
				t.Fatalf("%d of %d concurrent claims of one block won (%d refused), want exactly 1", len(wins), racers, others)
			}
			got, err := s.GetClaim(ctx, ref)
			noErr(t, err, "GetClaim")
			if got != wins[0] {
				t.Fatalf("stored claim %+v, the winner was %+v", got, wins[0])
			}
		})
	}
}

// testListClaimsExact: selecting by node or pool returns exactly that
// node's or pool's claims — also for names that a backend can only index
// by hash, and for names that are prefixes of each other.
func testListClaimsExact(t *testing.T, s store.Store) {
	ctx := t.Context()
	long := strings.Repeat("n", store.MaxNameBytes)
	nodes := []string{"node-a", "node-a.b", "node-ab", "Node-A", long, long[:store.MaxNameBytes-1] + "m"}
	var all []store.Claim
	for i, node := range nodes {
		for _, f := range families {
			for j := range 2 {
				c, err := s.CreateClaim(ctx, claimOf(f.pool.Name, f.pool.BlockAt(uint64(10*i+j)), node))
				noErr(t, err, "CreateClaim")
				all = append(all, c)
			}
		}
	}
	sortClaims(all)
	check := func(sel store.ClaimSelector, keep func(store.Claim) bool) {
		t.Helper()
		var want []store.Claim
		for _, c := range all {
			if keep(c) {
				want = append(want, c)
			}
		}
		got, err := s.ListClaims(ctx, sel)
		noErr(t, err, fmt.Sprintf("ListClaims(%+v)", sel))
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("ListClaims(%.40q) =\n %+v\nwant\n %+v", fmt.Sprintf("%+v", sel), got, want)
		}
	}
	for _, node := range nodes {
		check(store.ClaimSelector{Node: node}, func(c store.Claim) bool { return c.Node == node })
	}
	check(store.ClaimSelector{Node: "node"}, func(store.Claim) bool { return false })
	for _, f := range families {
		check(store.ClaimSelector{Pool: f.pool.Name}, func(c store.Claim) bool { return c.Pool == f.pool.Name })
	}
	check(store.ClaimSelector{}, func(store.Claim) bool { return true })
}

// testListClaimsCached: a cached list never shows a claim that was never
// created nor one of another node, and catches up with the current list.
func testListClaimsCached(t *testing.T, s store.Store) {
	ctx := t.Context()
	f := families[0]
	var ever []store.Claim
	for i, node := range []string{"node-a", "node-b"} {
		for j := range 3 {
			c, err := s.CreateClaim(ctx, claimOf(f.pool.Name, f.pool.BlockAt(uint64(10*i+j)), node))
			noErr(t, err, "CreateClaim")
			ever = append(ever, c)
		}
	}
	noErr(t, s.DeleteClaim(ctx, ever[0]), "DeleteClaim")
	sel := store.ClaimSelector{Node: "node-a", Cached: true}
	current, err := s.ListClaims(ctx, store.ClaimSelector{Node: "node-a"})
	noErr(t, err, "ListClaims")
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := s.ListClaims(ctx, sel)
		noErr(t, err, "ListClaims cached")
		for _, c := range got {
			if c.Node != "node-a" || !slices.ContainsFunc(ever, func(e store.Claim) bool { return e.BlockRef == c.BlockRef && e.Node == c.Node }) {
				t.Fatalf("cached ListClaims(node-a) shows %+v, never created for node-a", c)
			}
		}
		if reflect.DeepEqual(got, current) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("cached ListClaims(node-a) = %+v after 10 s, current %+v", got, current)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// testClaimSameCIDRTwoPools: overlapping pools (two networks on one
// subnet) claim the same CIDR independently.
func testClaimSameCIDRTwoPools(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, f := range families {
		cidr := f.pool.BlockAt(0)
		a, err := s.CreateClaim(ctx, claimOf(f.pool.Name, cidr, "node-a"))
		noErr(t, err, "CreateClaim in the first pool")
		b, err := s.CreateClaim(ctx, claimOf(f.pool.Name+"-other", cidr, "node-b"))
		noErr(t, err, "CreateClaim of the same CIDR in another pool")
		for _, c := range []store.Claim{a, b} {
			got, err := s.GetClaim(ctx, c.BlockRef)
			noErr(t, err, "GetClaim")
			if got != c {
				t.Fatalf("GetClaim(%s) = %+v, want %+v", c.BlockRef, got, c)
			}
		}
	}
}

func testClaimInvalid(t *testing.T, s store.Store) {
	ctx := t.Context()
	cases := []struct {
		name string
		c    store.Claim
	}{
		{"IPv4 host bits", claimOf("v4", netip.MustParsePrefix("10.20.0.1/26"), "n")},
		{"IPv6 host bits", claimOf("v6", netip.MustParsePrefix("fd00::1/122"), "n")},
		{"no CIDR", claimOf("v4", netip.Prefix{}, "n")},
		{"IPv4 block over 2^16", claimOf("v4", netip.MustParsePrefix("10.0.0.0/15"), "n")},
		{"IPv6 block over 2^16", claimOf("v6", netip.MustParsePrefix("fd00::/111"), "n")},
		{"empty node", claimOf("v4", netip.MustParsePrefix("10.20.0.0/26"), "")},
		{"node with slash", claimOf("v4", netip.MustParsePrefix("10.20.0.0/26"), "a/b")},
		{"empty pool", claimOf("", netip.MustParsePrefix("10.20.0.0/26"), "n")},
	}
	for _, c := range cases {
		_, err := s.CreateClaim(ctx, c.c)
		wantErr(t, err, store.ErrInvalid, "CreateClaim with "+c.name)
	}
	l, err := s.ListClaims(ctx, store.ClaimSelector{})
	noErr(t, err, "ListClaims")
	if len(l) != 0 {
		t.Fatalf("refused claims were stored: %+v", l)
	}
}

func sortClaims(cs []store.Claim) {
	slices.SortFunc(cs, func(a, b store.Claim) int { return a.BlockRef.Compare(b.BlockRef) })
}
