package consistency

import (
	"cmp"
	"context"
	"net/netip"
	"slices"

	"github.com/ipkeeper/ipkeeper/internal/kv"
)

// MaxRounds bounds how often Repair re-reads the datastore and repairs
// again: after conflicts with concurrent writers, and for fixes that only
// become possible once an earlier fix is in (a handle whose block must be
// corrected before its address can be taken back).
const MaxRounds = 5

// Check reads the datastore once and reports every problem. It writes
// nothing.
func Check(ctx context.Context, store kv.Store) (Report, error) {
	snap, err := read(ctx, store)
	if err != nil {
		return Report{}, err
	}
	return Report{Counts: snap.counts(), Problems: problems(detect(snap))}, nil
}

// Repair checks the datastore and applies every fix the Kind constants
// document, then checks again. Found lists what the first check found,
// Actions what was changed, Remaining what a final check still finds
// (problems that are reported only, or fixes that lost to concurrent
// writers MaxRounds times).
func Repair(ctx context.Context, store kv.Store) (RepairResult, error) {
	var res RepairResult
	for round := range MaxRounds + 1 {
		snap, err := read(ctx, store)
		if err != nil {
			return res, err
		}
		fs := detect(snap)
		if round == 0 {
			res.Found = problems(fs)
		}
		m := newModel(snap)
		var plan []planned
		for _, f := range fs {
			if f.fix != nil {
				plan = append(plan, planned{keys: f.keys, actions: f.fix(m)})
			}
		}
		if len(plan) == 0 || round == MaxRounds {
			res.Remaining = problems(fs)
			break
		}
		done, _, err := m.commit(ctx, store, plan)
		res.Actions = append(res.Actions, done...)
		if err != nil {
			return res, err
		}
	}
	if res.Actions == nil {
		res.Actions = []Action{}
	}
	return res, nil
}

// planned is a fix applied to the model: the keys it depends on and what
// it did.
type planned struct {
	keys    []string
	actions []Action
}

func (s *snapshot) counts() Counts {
	c := Counts{Pools: len(s.pools), Blocks: len(s.blocks), Handles: len(s.handles), Affinities: len(s.affs)}
	for _, r := range s.blocks {
		if !r.unknown {
			c.Allocated += len(r.block.Owners)
		}
	}
	return c
}

// problems returns the problems of the findings in a stable order: by
// kind (in the order of Kinds), pool, block, address, handle, key.
func problems(fs []finding) []Problem {
	out := make([]Problem, 0, len(fs))
	for _, f := range fs {
		p := f.Problem
		p.Repairable = f.fix != nil
		out = append(out, p)
	}
	sortProblems(out)
	return out
}

// sortProblems puts problems in the order every report uses: by kind (in
// the order of Kinds), pool, block, address, handle, key.
func sortProblems(ps []Problem) {
	slices.SortStableFunc(ps, func(a, b Problem) int {
		return cmp.Or(
			cmp.Compare(slices.Index(Kinds, a.Kind), slices.Index(Kinds, b.Kind)),
			cmp.Compare(a.Pool, b.Pool),
			comparePrefix(a.Block, b.Block),
			compareAddr(a.Addr, b.Addr),
			cmp.Compare(a.Handle, b.Handle),
			cmp.Compare(a.Key, b.Key),
		)
	})
}

func comparePrefix(a, b string) int {
	pa, ea := netip.ParsePrefix(a)
	pb, eb := netip.ParsePrefix(b)
	if ea != nil || eb != nil {
		return cmp.Compare(a, b)
	}
	return cmp.Or(pa.Addr().Compare(pb.Addr()), cmp.Compare(pa.Bits(), pb.Bits()))
}

func compareAddr(a, b string) int {
	aa, ea := netip.ParseAddr(a)
	ab, eb := netip.ParseAddr(b)
	if ea != nil || eb != nil {
		return cmp.Compare(a, b)
	}
	return aa.Compare(ab)
}
