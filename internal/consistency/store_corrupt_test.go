package consistency

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked/kvbackedtest"
)

// namer is the typed store with NodeNames, as a backend offering
// NodeNamer would list the names (here from the kv layout's keys).
type namer struct{ *kvbacked.Store }

func (n namer) NodeNames(ctx context.Context) ([]string, error) {
	es, err := n.KV().List(ctx, "nodes/")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range es {
		// nodes/<node>/<part>
		name, _, _ := strings.Cut(strings.TrimPrefix(e.Key, "nodes/"), "/")
		if len(out) == 0 || out[len(out)-1] != name {
			out = append(out, name)
		}
	}
	return out, nil
}

// TestCheckStoreCorruptObjects: an object that cannot be decoded is
// reported by name and every other object is still checked; what depends
// on the unreadable one is neither reported nor repaired.
func TestCheckStoreCorruptObjects(t *testing.T) {
	for _, f := range typedFamilies {
		p := f.pool
		t.Run(f.name, func(t *testing.T) {
			typedBackends(t, func(t *testing.T, s *kvbacked.Store) {
				createPools(t, s, tp4, tp6)
				// nbad: claimed, undecodable. n1: a loan whose lender has
				// no record. n2: an orphan claim (repairable only when every
				// object can be read). nhidden: undecodable, named by nothing.
				mustClaim(t, s, blockAt(p, 0), "nbad")
				kvbackedtest.PutRawNode(t, s.KV(), "nbad", kvbackedtest.RawNode{Head: `{}`, Blocks: map[store.BlockRef]string{
					blockAt(p, 0): `{"pool":"` + p.Name + `","cidr":"` + blockAt(p, 0).CIDR.String() + `","free":"0-3,2"}`,
				}})
				other := tp6
				if p.Name == tp6.Name {
					other = tp4
				}
				mustClaim(t, s, blockAt(other, 0), "n1")
				n1 := holding(t, store.Node{Name: "n1"}, other, blockAt(other, 0), handle("n1", "c0"))
				n1.Loans = []store.Loan{{Handle: handle("n1", "c1").ID, Lender: "n3"}}
				mustCreateNode(t, s, n1)
				mustClaim(t, s, blockAt(p, 1), "n2")
				kvbackedtest.PutRawNode(t, s.KV(), "nhidden", kvbackedtest.RawNode{Head: `not json`})

				r := mustCheck(t, s)
				wantKinds(t, "check", r.Problems, "corrupt-value!", "corrupt-value!", "loan-without-record", "claim-without-block!")
				keys := []string{}
				for _, pr := range r.Problems {
					keys = append(keys, pr.Key)
				}
				// Without NodeNamer, an object nothing names is not found.
				if !slices.Contains(keys, "node/nbad") || !slices.Contains(keys, "nodes") || slices.Contains(keys, "node/nhidden") {
					t.Fatalf("problems name %v; want node/nbad and the list of nodes", keys)
				}
				res, err := RepairStore(t.Context(), s)
				if err != nil {
					t.Fatal(err)
				}
				wantKinds(t, "remaining", res.Remaining, "corrupt-value!", "corrupt-value!", "claim-without-block!")
				if _, err := s.GetNode(t.Context(), "n2"); !isErr(err, store.ErrNotFound) {
					t.Fatalf("n2's claim was adopted while objects could not be read: %v", err)
				}

				// With NodeNamer every object is found: the hidden one is
				// reported too, and the orphan claim is adopted.
				r = mustCheck(t, namer{s})
				wantKinds(t, "check with names", r.Problems, "corrupt-value!", "corrupt-value!", "claim-without-block!")
				if r.Problems[0].Key != "node/nbad" || r.Problems[1].Key != "node/nhidden" {
					t.Fatalf("with NodeNamer: %s; want node/nbad and node/nhidden reported", describe(r.Problems))
				}
				res, err = RepairStore(t.Context(), namer{s})
				if err != nil {
					t.Fatal(err)
				}
				wantKinds(t, "remaining with names", res.Remaining, "corrupt-value!", "corrupt-value!", "claim-without-block!")
			})
		})
	}
}

// TestCheckStoreCorruptPoolAndClaim: an undecodable pool or claim fails
// its list; the others are read one pool at a time and checked.
func TestCheckStoreCorruptPoolAndClaim(t *testing.T) {
	typedBackends(t, func(t *testing.T, s *kvbacked.Store) {
		createPools(t, s, tp4, tp6)
		a := newAlloc(s)
		if _, err := a.Allocate(t.Context(), dualReq(handle("n1", "c1"), tp4, tp6)); err != nil {
			t.Fatal(err)
		}
		putRaw(t, s, "pools2/p4", `{"name":`)
		// p6's claims stay readable: its orphan claim is still found.
		mustClaim(t, s, blockAt(tp6, 1), "n2")
		// The pools list and pool p4 are reported; p4's blocks are not
		// judged (its definition cannot be read), p6 is checked.
		wantKinds(t, "corrupt pool", mustCheck(t, s).Problems, "corrupt-value!", "corrupt-value!", "claim-without-block")

		ref := blockAt(tp4, 1)
		putRaw(t, s, "claims/p4/"+strings.Replace(ref.CIDR.String(), "/", "-", 1), `{`)
		r := mustCheck(t, s)
		// The claims list fails; p6's claims are listed on their own,
		// p4's (unreadable) are not judged: n1's p4 block is not
		// reported as unclaimed.
		wantKinds(t, "corrupt claim", r.Problems, "corrupt-value!", "corrupt-value!", "corrupt-value!", "corrupt-value!", "claim-without-block")
	})
}

// changing is a store whose first ListNodes is followed by a change, as
// an allocation between the check's first and second look would make.
type changing struct {
	store.Store
	once   sync.Once
	change func()
}

func (c *changing) ListNodes(ctx context.Context, sel store.NodeSelector) ([]store.Node, error) {
	ns, err := c.Store.ListNodes(ctx, sel)
	c.once.Do(c.change)
	return ns, err
}

// TestCheckStoreSecondLook: a problem the first read shows but a second
// look does not (here a block whose claim is created right after the node
// objects were listed) is not reported, nor repaired.
func TestCheckStoreSecondLook(t *testing.T) {
	for _, f := range typedFamilies {
		t.Run(f.name, func(t *testing.T) {
			typedBackends(t, func(t *testing.T, s *kvbacked.Store) {
				createPools(t, s, tp4, tp6)
				ref := blockAt(f.pool, 0)
				mustCreateNode(t, s, holding(t, store.Node{Name: "n1"}, f.pool, ref, handle("n1", "c1")))
				claimLate := func() { mustClaim(t, s, ref, "n1") }
				if r := mustCheck(t, &changing{Store: s, change: claimLate}); len(r.Problems) != 0 {
					t.Fatalf("reported what a second look no longer shows:\n%s", describe(r.Problems))
				}
				// The claim exists now: a check of the unchanged store is clean.
				if r := mustCheck(t, s); len(r.Problems) != 0 {
					t.Fatal(describe(r.Problems))
				}
			})
		})
	}
}
