package consistency

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
)

// repairAt returns a before-hook that runs RepairStore on s once, when the
// allocator is about to send write op of object name, keeping the result.
func repairAt(t *testing.T, s store.Store, op, name string, out *RepairResult) func(string, string) {
	var once sync.Once
	return func(o, n string) {
		if o != op || n != name {
			return
		}
		once.Do(func() {
			res, err := RepairStore(context.WithoutCancel(t.Context()), s)
			if err != nil {
				t.Error(err)
			}
			*out = res
		})
	}
}

// TestRepairStoreDuringBorrowingADD runs RepairStore while a borrowing ADD
// is between its writes (its object holds the loan, the lender's object
// not yet the record): the repair drops the loan, and its write of the
// lender's object makes the ADD's lender write fail, so the ADD undoes and
// redoes itself: it returns addresses its records hold and the store ends
// clean, with no lender record the borrower's DEL would not find.
func TestRepairStoreDuringBorrowingADD(t *testing.T) {
	typedBackends(t, func(t *testing.T, s *kvbacked.Store) {
		createPools(t, s, tp4, tp6)
		fillIPv4(t, s)
		var res RepairResult
		c := newCrashing(s, -1)
		c.before = repairAt(t, s, "UpdateNode", "n9", &res)
		h, err := newAlloc(c).Allocate(t.Context(), dualReq(h1, tp4, tp6))
		if err != nil {
			t.Fatal(err)
		}
		wantKinds(t, "repair found", res.Found, "loan-without-record")
		if len(res.Actions) != 1 {
			t.Fatalf("repair actions %+v; want the loan dropped", res.Actions)
		}
		if r := mustCheck(t, s); len(r.Problems) != 0 {
			t.Fatalf("after the ADD:\n%s", describe(r.Problems))
		}
		wantHeld(t, s, h)
		if _, err := newAlloc(s).Release(t.Context(), "n1", h1.ID); err != nil {
			t.Fatal(err)
		}
		for a, hs := range held(t, s) {
			if slices.ContainsFunc(hs, func(x string) bool { return x == "n9/"+h1.ID || x == "n1/"+h1.ID }) {
				t.Fatalf("%s still held by %v after DEL", a, hs)
			}
		}
	})
}

// TestRepairStoreDuringFirstADD runs RepairStore while a node's first ADD
// has claimed its blocks and not yet written its object: the repair adopts
// the claims into the node's object, the ADD's create then conflicts and
// its retry allocates from the adopted blocks. No claim is deleted, so no
// block is ever held without one.
func TestRepairStoreDuringFirstADD(t *testing.T) {
	typedBackends(t, func(t *testing.T, s *kvbacked.Store) {
		createPools(t, s, tp4, tp6)
		var res RepairResult
		c := newCrashing(s, -1)
		c.before = repairAt(t, s, "CreateNode", "n1", &res)
		h, err := newAlloc(c).Allocate(t.Context(), dualReq(h1, tp4, tp6))
		if err != nil {
			t.Fatal(err)
		}
		wantKinds(t, "repair found", res.Found, "claim-without-block", "claim-without-block")
		if r := mustCheck(t, s); len(r.Problems) != 0 {
			t.Fatalf("after the ADD:\n%s", describe(r.Problems))
		}
		wantHeld(t, s, h)
	})
}

// wantHeld checks that every address of h is held by a record of h, and
// by nothing else.
func wantHeld(t *testing.T, s store.Store, h ipam.Handle) {
	t.Helper()
	all := held(t, s)
	for _, ip := range h.IPs {
		hs := all[ip.Pool+"/"+ip.Addr.String()]
		if len(hs) != 1 || !slices.ContainsFunc(hs, func(x string) bool { return len(x) > len(h.ID) && x[len(x)-len(h.ID):] == h.ID }) {
			t.Fatalf("%s returned to %s is held by %v", ip.Addr, h.ID, hs)
		}
	}
}

// TestRepairStoreConcurrentWithAllocations is the safety test: RepairStore
// runs over and over while Allocator instances (one per simulated
// plugin process) ADD and DEL dual-stack handles on three nodes sharing
// pools of two blocks (so the third node borrows), some ADDs and DELs
// stopping after a number of writes as if killed (the runtime then
// retries the DEL). Every address a successful ADD returned must still be
// held by that handle, and by no other, until its DEL, which must free
// exactly those addresses; at the end, one more repair leaves a clean
// store, and after the last DELs nothing is held.
func TestRepairStoreConcurrentWithAllocations(t *testing.T) {
	rounds := 30
	if testing.Short() {
		rounds = 8
	}
	typedBackends(t, func(t *testing.T, s *kvbacked.Store) {
		createPools(t, s, tp4, tp6)
		ctx := t.Context()
		var done atomic.Bool
		var repairs, actions atomic.Int64
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10*rounds && !done.Load(); i++ {
				res, err := RepairStore(ctx, s)
				if err != nil {
					t.Error(err)
					return
				}
				repairs.Add(1)
				actions.Add(int64(len(res.Actions)))
			}
		}()
		var workers sync.WaitGroup
		live := make([][]ipam.Handle, 6)
		for w := range 6 {
			workers.Add(1)
			go func() {
				defer workers.Done()
				live[w] = churn(t, s, fmt.Sprintf("n%d", w%3+1), w, rounds)
			}()
		}
		workers.Wait()
		done.Store(true)
		wg.Wait()
		if t.Failed() {
			return
		}
		t.Logf("%d repairs during the run, %d actions", repairs.Load(), actions.Load())
		for _, hs := range live {
			for _, h := range hs {
				wantHeld(t, s, h)
			}
		}
		res, err := RepairStore(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Remaining) != 0 {
			t.Fatalf("left after the run:\n%s", describe(res.Remaining))
		}
		a := newAlloc(s)
		for _, hs := range live {
			for _, h := range hs {
				freed, err := a.Release(ctx, h.Node, h.ID)
				if err != nil {
					t.Fatal(err)
				}
				wantGone(t, s, h, freed)
			}
		}
		if all := held(t, s); len(all) != 0 {
			t.Fatalf("after every DEL, still held: %v", all)
		}
		if r := mustCheck(t, s); len(r.Problems) != 0 {
			t.Fatalf("after every DEL:\n%s", describe(r.Problems))
		}
	})
}

// churn ADDs and DELs handles of one node for rounds rounds, each ADD and
// DEL through its own allocator (a plugin process); every fourth ADD and
// every fifth DEL is stopped after a pseudo-random number of writes, then
// DELed again whole (what the runtime does after a failed ADD or DEL). It
// returns the handles still allocated.
func churn(t *testing.T, s store.Store, node string, w, rounds int) []ipam.Handle {
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(uint64(w), 7))
	var live []ipam.Handle
	// del DELs h; live says h was returned by a successful ADD, whose
	// addresses must then still be h's right before.
	del := func(h ipam.Handle, live, crash bool) bool {
		if live {
			wantHeld(t, s, h)
		}
		var freed []netip.Addr
		var err error
		if crash {
			c := newCrashing(s, rng.Int64N(3))
			freed, err = newAlloc(c).Release(ctx, node, h.ID)
		}
		if !crash || err != nil {
			freed, err = newAlloc(s).Release(ctx, node, h.ID)
		}
		if err != nil {
			t.Errorf("DEL %s: %v", h.ID, err)
			return false
		}
		wantGone(t, s, h, freed)
		return true
	}
	for i := range rounds {
		h := handle(node, fmt.Sprintf("w%d-%d", w, i))
		if i%4 == 3 {
			c := newCrashing(s, rng.Int64N(3))
			if got, err := newAlloc(c).Allocate(ctx, dualReq(h, tp4, tp6)); err == nil {
				wantHeld(t, s, got)
				live = append(live, got)
				continue
			}
			if !del(h, false, false) {
				return live
			}
			continue
		}
		// Some writes are preceded by a repair, so that repairs also run
		// exactly between an ADD's writes, not only when the scheduler
		// happens to put them there.
		c := newCrashing(s, -1)
		c.before = func(string, string) {
			if rng.IntN(4) == 0 {
				if _, err := RepairStore(ctx, s); err != nil {
					t.Error(err)
				}
			}
		}
		got, err := newAlloc(c).Allocate(ctx, dualReq(h, tp4, tp6))
		switch {
		case errors.Is(err, allocator.ErrExhausted):
			// The pools are small; free one and go on.
		case err != nil:
			t.Errorf("ADD %s: %v", h.ID, err)
			return live
		default:
			wantHeld(t, s, got)
			live = append(live, got)
		}
		if len(live) > 3 || rng.IntN(3) == 0 && len(live) > 0 {
			j := rng.IntN(len(live))
			if !del(live[j], true, rng.IntN(5) == 0) {
				return live
			}
			live = slices.Delete(live, j, j+1)
		}
	}
	return live
}

// wantGone checks that no record of h is left after its DEL, and that the
// DEL reported freeing only addresses of h. (It may report fewer:
// Allocator.Release returns only what its last attempt freed.)
func wantGone(t *testing.T, s store.Store, h ipam.Handle, freed []netip.Addr) {
	t.Helper()
	for a, hs := range held(t, s) {
		if slices.ContainsFunc(hs, func(x string) bool { return strings.HasSuffix(x, "/"+h.ID) }) {
			t.Errorf("%s still held by %v after the DEL of %s", a, hs, h.ID)
		}
	}
	if len(h.IPs) == 0 {
		return
	}
	for _, a := range freed {
		if !slices.ContainsFunc(h.IPs, func(ip ipam.HandleIP) bool { return ip.Addr == a }) {
			t.Errorf("DEL of %s freed %s; its ADD returned %v", h.ID, a, h.IPs)
		}
	}
}
