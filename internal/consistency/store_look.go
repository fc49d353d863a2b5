package consistency

import (
	"context"
	"errors"
	"slices"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// storeFinding is a problem of the typed store with its second look and,
// when it is repairable, its fix.
type storeFinding struct {
	Problem
	// look reads the objects involved again and reports whether the
	// problem is still there; it keeps what it read for fix. nil: the
	// first read is the only one (a list that cannot be decoded).
	look func(ctx context.Context, s store.Store) (bool, error)
	// fix repairs the problem, compare-and-swap at the versions look
	// saw. nil: reported only.
	fix func(ctx context.Context, s store.Store) ([]Action, error)
}

// lookAttempts bounds how often a second look is retried when the object
// it is anchored on changes while it reads the others.
const lookAttempts = 3

// sandwich is the second look at a problem involving two objects: it
// reads a, then b, then a again. When a's version did not change, b's
// state (as read) coexisted with a's state: both held at the moment b was
// read, whatever the writers did before or after. It reports whether a
// and b both showed the problem then; a changing on every attempt counts
// as not shown (the problem is looked at again on the next pass).
func sandwich(ctx context.Context, a func(context.Context) (store.Version, bool, error), b func(context.Context) (bool, error)) (bool, error) {
	for range lookAttempts {
		va, ok, err := a(ctx)
		if err != nil || !ok {
			return false, ignoreGone(err)
		}
		if ok, err = b(ctx); err != nil || !ok {
			return false, ignoreGone(err)
		}
		vb, ok, err := a(ctx)
		if err != nil || !ok {
			return false, ignoreGone(err)
		}
		if va == vb {
			return true, nil
		}
	}
	return false, nil
}

// getNode reads a node object; an absent one is returned empty, at
// Version "".
func getNode(ctx context.Context, s store.Store, name string) (store.Node, error) {
	n, err := s.GetNode(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return store.Node{Name: name}, nil
	}
	return n, err
}

// nodeReader returns a reader of node name for sandwich that keeps the
// object in *into and reports whether holds says the problem is there. An
// absent object is read as empty.
func nodeReader(s store.Store, name string, into *store.Node, holds func(store.Node) bool) func(context.Context) (store.Version, bool, error) {
	return func(ctx context.Context) (store.Version, bool, error) {
		n, err := getNode(ctx, s, name)
		if err != nil {
			return "", false, err
		}
		*into = n
		return n.Version, holds(n), nil
	}
}

// writeNode stores n at n.Version as the allocator does: created when
// absent, deleted when it holds nothing.
func writeNode(ctx context.Context, s store.Store, n store.Node) (store.Node, error) {
	empty := len(n.Blocks) == 0 && len(n.Handles) == 0 && len(n.Loans) == 0
	switch {
	case n.Version == "" && empty:
		return n, nil
	case n.Version == "":
		out, err := s.CreateNode(ctx, n)
		if errors.Is(err, store.ErrExists) {
			err = errors.Join(store.ErrConflict, err)
		}
		return out, err
	case empty:
		return store.Node{Name: n.Name}, s.DeleteNode(ctx, n)
	}
	return s.UpdateNode(ctx, n)
}

func hasLoan(n store.Node, l store.Loan) bool { return slices.Contains(n.Loans, l) }

// lentRecord reports whether lender object n holds a record of handle id
// for node borrower.
func lentRecord(n store.Node, id, borrower string) bool {
	h, ok := n.Handle(id)
	return ok && h.Node == borrower
}
