package consistency

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/nodealloc"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// MaxRounds bounds how often RepairStore reads the store and repairs
// again: after conflicts with concurrent writers, and for fixes that only
// become possible once an earlier fix is in.
const MaxRounds = 5

// CheckStore reads the typed store (package store: pools, block claims,
// node objects) and reports every problem. It writes nothing.
//
// There is no snapshot of the whole store: objects are read one at a time
// while allocations go on. So every problem is reported only when a
// second look shows it again: the objects it involves are read anew, the
// first of them twice, and the problem counts only when that object did
// not change in between (then what was read of the others held at the
// same moment). An object that cannot be decoded is reported by name, and
// the others are still checked.
func CheckStore(ctx context.Context, s store.Store) (Report, error) {
	v, err := readView(ctx, s)
	if err != nil {
		return Report{}, err
	}
	fs, err := confirmAll(ctx, s, detectStore(v))
	if err != nil {
		return Report{}, err
	}
	found, err := reservedFindings(ctx, s, v)
	if err != nil {
		return Report{}, err
	}
	return Report{Counts: v.counts(), Problems: storeProblems(fs), Findings: found}, nil
}

// RepairStore checks the typed store and applies the fixes the Kind
// constants document, then checks again. Found lists what the first
// check found, Actions what was changed, Remaining what a final check
// still finds (problems that are reported only, or fixes that lost to
// concurrent writers MaxRounds times). Each fix writes one object at a time, compare-and-swap at the version a
// second look just read, and none frees an address: the fixes create a
// missing claim for the block's holder, add an adopted block empty, drop a
// loan (which holds no address) or add one. A fix that loses to a
// concurrent writer is looked at again in the next round, at most
// MaxRounds times.
func RepairStore(ctx context.Context, s store.Store) (RepairResult, error) {
	res := RepairResult{Actions: []Action{}}
	for round := 0; ; round++ {
		v, err := readView(ctx, s)
		if err != nil {
			return res, err
		}
		fs, err := confirmAll(ctx, s, detectStore(v))
		if err != nil {
			return res, err
		}
		if round == 0 {
			res.Found = storeProblems(fs)
		}
		fixable := slices.DeleteFunc(slices.Clone(fs), func(f storeFinding) bool { return f.fix == nil })
		if len(fixable) == 0 || round == MaxRounds {
			res.Remaining = storeProblems(fs)
			return res, nil
		}
		for _, f := range fixable {
			// Look again right before writing: an earlier fix of this
			// round may have changed the objects.
			ok, err := f.look(ctx, s)
			if err != nil {
				return res, err
			}
			if !ok {
				continue
			}
			done, err := f.fix(ctx, s)
			res.Actions = append(res.Actions, done...)
			if err != nil && !lostRace(err) {
				return res, fmt.Errorf("consistency: repair %s %s: %w", f.Kind, f.Key, err)
			}
		}
	}
}

// lostRace reports whether a fix failed because the store changed (or
// cannot take the change) rather than because it cannot be reached: the
// next round looks again.
func lostRace(err error) bool {
	for _, e := range []error{store.ErrConflict, store.ErrNotFound, store.ErrExists, store.ErrTooLarge, store.ErrInvalid, store.ErrCorrupt} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// confirmAll keeps the findings a second look shows again.
func confirmAll(ctx context.Context, s store.Store, fs []storeFinding) ([]storeFinding, error) {
	out := fs[:0]
	for _, f := range fs {
		if f.look != nil {
			ok, err := f.look(ctx, s)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
		}
		out = append(out, f)
	}
	return out, nil
}

// adoptClaim adds the block of claim, empty, to the object of the node the
// claim names (n, as the second look read it), as that node's next ADD
// would. When the claim has gone meanwhile (the ADD that created it
// returned it, a pool removal deleted it), the block is taken out again
// while it is empty.
func adoptClaim(ctx context.Context, s store.Store, p Problem, claim store.Claim, n store.Node) ([]Action, error) {
	pool, err := s.GetPool(ctx, claim.Pool)
	if err != nil {
		return nil, err
	}
	if pool.Spec.Deleting || claim.CIDR.Bits() != pool.Spec.BlockSize || !pool.Spec.CIDR.Contains(claim.CIDR.Addr()) {
		return nil, nil
	}
	if _, err := writeNode(ctx, s, nodealloc.AddBlock(n, pool.Spec, claim.CIDR)); err != nil {
		return nil, err
	}
	done := []Action{act(p, fmt.Sprintf("added block %s, empty, to node object %s, which its claim names", claim.BlockRef, claim.Node))}
	c, err := s.GetClaim(ctx, claim.BlockRef)
	if err == nil && c.Node == claim.Node {
		return done, nil
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return done, err
	}
	for range lookAttempts {
		m, err := getNode(ctx, s, claim.Node)
		if err != nil {
			return done, err
		}
		next, err := nodealloc.RemoveBlock(m, claim.BlockRef)
		if err != nil {
			return done, nil // gone, or in use: a later look finds it
		}
		_, err = writeNode(ctx, s, next)
		if err == nil {
			return append(done, act(p, fmt.Sprintf("the claim of %s went away meanwhile: took the empty block out of node object %s again", claim.BlockRef, claim.Node))), nil
		}
		if !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
			return done, err
		}
	}
	return done, nil
}

// dropLoan drops a loan whose lender holds no record for it. The lender's
// object is first written unchanged at the version the second look saw:
// an ADD that wrote the loan read the lender before that, so its own write
// of the lender now fails and it undoes itself, instead of recording an
// address in the lender after its loan is gone.
func dropLoan(ctx context.Context, s store.Store, p Problem, borrower, lender store.Node, loan store.Loan) ([]Action, error) {
	fenced := ""
	if lender.Version != "" {
		if _, err := s.UpdateNode(ctx, lender); err != nil {
			return nil, err
		}
		fenced = fmt.Sprintf("wrote node object %s unchanged (an ADD on its way there now fails), then ", lender.Name)
	}
	next := nodealloc.Clone(borrower)
	next.Loans = slices.DeleteFunc(next.Loans, func(l store.Loan) bool { return l == loan })
	if _, err := writeNode(ctx, s, next); err != nil {
		return nil, err
	}
	return []Action{act(p, fmt.Sprintf("%sdropped the loan of %q from %s from node object %s", fenced, loan.Handle, loan.Lender, borrower.Name))}, nil
}

// addLoan adds to a borrower's object (created when absent) the loan
// naming a lender that holds a record of the borrower's handle.
func addLoan(ctx context.Context, s store.Store, p Problem, borrower store.Node, loan store.Loan) ([]Action, error) {
	next := nodealloc.Clone(borrower)
	next.Loans = append(next.Loans, loan)
	if _, err := writeNode(ctx, s, next); err != nil {
		return nil, err
	}
	return []Action{act(p, fmt.Sprintf("added the loan of %q from %s to node object %s, so that its DEL frees that record", loan.Handle, loan.Lender, borrower.Name))}, nil
}

// storeProblems returns the problems of the findings in the order Check
// sorts them: by kind (in the order of Kinds), pool, block, address,
// handle, key.
func storeProblems(fs []storeFinding) []Problem {
	out := make([]Problem, 0, len(fs))
	for _, f := range fs {
		p := f.Problem
		p.Repairable = f.fix != nil
		out = append(out, p)
	}
	sortProblems(out)
	return out
}

func firstAddr(ips []ipam.HandleIP) netip.Addr {
	if len(ips) == 0 {
		return netip.Addr{}
	}
	return ips[0].Addr
}

func firstPool(ips []ipam.HandleIP) string {
	if len(ips) == 0 {
		return ""
	}
	return ips[0].Pool
}

// dropForeignBlock takes block ref, which another node's claim names, out
// of node object n (as the second look read it) while n holds no address
// of it: nothing is freed (n's node hands out none of its addresses, and
// the claimant's object is not touched), and n's node allocates from its
// own blocks again. A block that holds addresses by now is left alone.
func dropForeignBlock(ctx context.Context, s store.Store, p Problem, n store.Node, ref store.BlockRef) ([]Action, error) {
	next, err := nodealloc.RemoveBlock(n, ref)
	if err != nil {
		return nil, nil
	}
	if _, err := writeNode(ctx, s, next); err != nil {
		return nil, err
	}
	return []Action{act(p, fmt.Sprintf("took block %s, which holds no address there and whose claim names another node, out of node object %s", ref, n.Name))}, nil
}
