package consistency

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
)

// fillIPv4 has node n9 claim both blocks of tp4, so that any other node
// borrows its IPv4 address from n9.
func fillIPv4(t *testing.T, s store.Store) {
	t.Helper()
	a := newAlloc(s)
	for i := range 17 {
		if _, err := a.Allocate(t.Context(), dualReq(handle("n9", fmt.Sprintf("f%d", i)), tp4)); err != nil {
			t.Fatal(err)
		}
	}
}

// crashScenario is an allocator operation stopped after every number of
// its writes.
type crashScenario struct {
	name  string
	setup func(t *testing.T, s store.Store)
	op    func(ctx context.Context, a *allocator.Allocator) error
	// writes is how many writes the operation makes when it completes.
	writes int
	// left are the problems a crash after k writes leaves (none when k
	// is missing).
	left map[int][]string
}

var h1 = handle("n1", "c1")

var crashScenarios = []crashScenario{
	{
		name:  "first dual-stack ADD on a node",
		setup: func(*testing.T, store.Store) {},
		op: func(ctx context.Context, a *allocator.Allocator) error {
			_, err := a.Allocate(ctx, dualReq(h1, tp4, tp6))
			return err
		},
		writes: 3, // claim v4, claim v6, node object
		left:   map[int][]string{1: {"claim-without-block"}, 2: {"claim-without-block", "claim-without-block"}},
	},
	{
		name:  "dual-stack ADD borrowing its IPv4 address",
		setup: fillIPv4,
		op: func(ctx context.Context, a *allocator.Allocator) error {
			_, err := a.Allocate(ctx, dualReq(h1, tp4, tp6))
			return err
		},
		writes: 3, // claim v6, own object (v6 record, loan), lender's object
		left:   map[int][]string{1: {"claim-without-block"}, 2: {"loan-without-record"}},
	},
	{
		name: "DEL of a dual-stack handle with a borrowed address",
		setup: func(t *testing.T, s store.Store) {
			fillIPv4(t, s)
			if _, err := newAlloc(s).Allocate(t.Context(), dualReq(h1, tp4, tp6)); err != nil {
				t.Fatal(err)
			}
		},
		op: func(ctx context.Context, a *allocator.Allocator) error {
			_, err := a.Release(ctx, "n1", h1.ID)
			return err
		},
		writes: 2, // lender's object, own object
		left:   map[int][]string{1: {"loan-without-record"}},
	},
}

// TestRepairStoreAfterCrashedAllocator stops Allocator after each
// number of writes of an ADD or DEL (every later write fails, as if the
// process died): CheckStore finds exactly the remnant that crash point
// leaves, RepairStore repairs it, a second check is clean, no other
// handle's address changed, and the handle can then be allocated and
// released again leaving a clean store.
func TestRepairStoreAfterCrashedAllocator(t *testing.T) {
	for _, sc := range crashScenarios {
		t.Run(sc.name, func(t *testing.T) {
			for k := 0; k <= sc.writes; k++ {
				t.Run(fmt.Sprintf("crash after %d writes", k), func(t *testing.T) {
					typedBackends(t, func(t *testing.T, s *kvbacked.Store) {
						createPools(t, s, tp4, tp6)
						sc.setup(t, s)
						others := heldBy(held(t, s), func(h string) bool { return !strings.HasSuffix(h, "/"+h1.ID) })
						c := newCrashing(s, int64(k))
						err := sc.op(t.Context(), newAlloc(c))
						if k < sc.writes && err == nil {
							t.Fatalf("the operation succeeded with %d of its %d writes", k, sc.writes)
						}
						if k == sc.writes && err != nil {
							t.Fatalf("the operation failed with all %d writes allowed: %v", k, err)
						}
						wantKinds(t, "check after the crash", mustCheck(t, s).Problems, sc.left[k]...)
						res, err := RepairStore(t.Context(), s)
						if err != nil {
							t.Fatal(err)
						}
						if len(res.Remaining) != 0 {
							t.Fatalf("left after repair:\n%s", describe(res.Remaining))
						}
						if r := mustCheck(t, s); len(r.Problems) != 0 {
							t.Fatalf("check after repair:\n%s", describe(r.Problems))
						}
						if now := heldBy(held(t, s), func(h string) bool { return !strings.HasSuffix(h, "/"+h1.ID) }); !maps.EqualFunc(now, others, equalStrings) {
							t.Fatalf("other handles' addresses changed: before %v, after %v", others, now)
						}
						a := newAlloc(s)
						if _, err := a.Allocate(t.Context(), dualReq(h1, tp4, tp6)); err != nil {
							t.Fatal(err)
						}
						if _, err := a.Release(t.Context(), "n1", h1.ID); err != nil {
							t.Fatal(err)
						}
						if r := mustCheck(t, s); len(r.Problems) != 0 {
							t.Fatalf("check after ADD and DEL:\n%s", describe(r.Problems))
						}
						if now := held(t, s); !maps.EqualFunc(now, others, equalStrings) {
							t.Fatalf("after ADD and DEL of %s: held %v, want %v", h1.ID, now, others)
						}
					})
				})
			}
		})
	}
}

func heldBy(m map[string][]string, keep func(string) bool) map[string][]string {
	out := map[string][]string{}
	for a, hs := range m {
		for _, h := range hs {
			if keep(h) {
				out[a] = append(out[a], h)
			}
		}
	}
	return out
}

func equalStrings(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }
