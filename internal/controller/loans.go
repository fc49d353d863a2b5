package controller

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/nodealloc"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/storeview"
)

// Loans without a record. A borrower's node object names the lender of
// each borrowed address (store.Node.Loans): an ADD writes the loan before
// the record in the lender's object, a DEL drops it after that record. A
// loan whose lender holds no record of its handle for the borrower is what
// an ADD stopped between those writes leaves, or a sticky address moved
// to another node whose credentials may not write the old borrower's
// object. It is dropped from the borrower's object once two passes at
// least loanGrace apart saw it so, and only after the borrower's and the
// lender's objects, read afresh, still show it (the write is a
// compare-and-swap against that read of the borrower).

// addBound bounds how long an ADD writes to the datastore: the plugin's
// watchdog ends the invocation by its timeout, at most plugin.MaxTimeout
// (10 minutes), and a verb handed over to the agent ends by the plugin's
// deadline; the margin covers a write sent just before it. An ADD between
// its loan and its record therefore writes the record, or nothing more,
// within addBound of writing the loan.
const addBound = 11 * time.Minute

// loanGrace is how long a loan must be seen without its record before it
// is dropped: the leak grace period, and never less than addBound, so that
// an ADD under way is never taken for a stopped one.
func (c *Controller) loanGrace() time.Duration { return max(c.cfg.LeakGrace, addBound) }

// loanKey is the tracker key of a loan of borrower.
func loanKey(borrower string, l store.Loan) string {
	return borrower + "\x00" + l.Lender + "\x00" + l.Handle
}

// parseLoanKey splits a loanKey.
func parseLoanKey(k string) (string, store.Loan) {
	borrower, rest, _ := strings.Cut(k, "\x00")
	lender, handle, _ := strings.Cut(rest, "\x00")
	return borrower, store.Loan{Handle: handle, Lender: lender}
}

// lendsRecord reports whether lender object n holds a record of handle id
// for node borrower.
func lendsRecord(n store.Node, id, borrower string) bool {
	h, ok := n.Handle(id)
	return ok && h.Node == borrower
}

// loansWithoutRecord returns the keys of the loans in nodes whose lender
// holds no record of their handle for the borrower, sorted.
func loansWithoutRecord(nodes []store.Node) []string {
	byName := make(map[string]store.Node, len(nodes))
	for _, n := range nodes {
		byName[n.Name] = n
	}
	var keys []string
	for _, n := range nodes {
		for _, l := range n.Loans {
			if !lendsRecord(byName[l.Lender], l.Handle, n.Name) {
				keys = append(keys, loanKey(n.Name, l))
			}
		}
	}
	slices.Sort(keys)
	return keys
}

// loanPass observes the loans without a record in the view and drops those
// confirmed; it returns when a pending one is due (zero when none is).
// Nothing is dropped while the view is not synced.
func (c *Controller) loanPass(ctx context.Context, st store.Store, sv *storeview.View) time.Time {
	now := c.cfg.Now()
	snap := sv.Snapshot()
	if !snap.Synced || len(snap.Bad) > 0 {
		c.log.Warn("not looking at loans: the view of the datastore is not synced", "err", sv.Err())
		return now.Add(max(time.Second, c.cfg.LeakGrace/4))
	}
	confirmed, next := c.loans.Observe(now, loansWithoutRecord(snap.Nodes))
	for _, k := range confirmed {
		if ctx.Err() != nil || c.paused() {
			return next
		}
		borrower, loan := parseLoanKey(k)
		attrs := []any{"node", borrower, "handle", loan.Handle, "lender", loan.Lender}
		dropped, err := dropLoan(ctx, st, borrower, loan)
		switch {
		case errors.Is(err, store.ErrConflict):
			c.log.Info("loan not dropped: the borrower's node object changed since it was read", append(attrs, "err", err)...)
		case err != nil:
			c.log.Error("dropping a loan without a record failed", append(attrs, "err", err)...)
		case dropped:
			c.log.Info("dropped loan whose lender holds no record of its handle", attrs...)
		}
	}
	return next
}

// dropLoan reads the borrower's and the lender's objects and, when the
// borrower still holds the loan and the lender no record of its handle
// for the borrower, writes the borrower's object without the loan by
// compare-and-swap against that read. It reports whether it wrote.
func dropLoan(ctx context.Context, st store.Store, borrower string, loan store.Loan) (bool, error) {
	b, err := st.GetNode(ctx, borrower)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !slices.Contains(b.Loans, loan) {
		return false, nil
	}
	l, err := st.GetNode(ctx, loan.Lender)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return false, err
	}
	if err == nil && lendsRecord(l, loan.Handle, borrower) {
		return false, nil
	}
	next := nodealloc.Clone(b)
	next.Loans = slices.DeleteFunc(next.Loans, func(x store.Loan) bool { return x == loan })
	if _, err := st.UpdateNode(ctx, next); err != nil {
		return false, err
	}
	return true, nil
}
