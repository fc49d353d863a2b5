package allocator

import (
	"context"
	"errors"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// One write of a node object is bounded (store.Limits: the parts it puts
// or deletes, its bytes). A change of many handles of one node — leaks
// released together, a burst of allocations, a gone node's blocks — is
// made of edits, each whole on its own (a handle's record and its blocks'
// free queues change in the same edit), and written in as many writes as
// the limits need: each a compare-and-swap of the object at the version
// the previous write returned, holding whole edits only. A crash between
// two writes leaves the edits of the earlier ones made and none of the
// later ones half made.

// nodeEdit is one change of a node object, made whole or not at all: it
// returns n with the change made, or an error that leaves it out.
type nodeEdit func(n store.Node) (store.Node, error)

// takeFitting makes edits on n in order while what they change together
// fits one write of the store. It returns n with the edits made, how many
// of edits it considered (the rest wait for another write) and whether it
// changed n; errs[i] is set to edit i's error, or nil when it was made.
// The first edit that changes n is always made, so that a write too large
// on its own is refused by the store instead of never being tried.
func (a *Allocator) takeFitting(n store.Node, edits []nodeEdit, errs []error) (store.Node, int, bool) {
	lim := a.store.Limits()
	cur, changed := n, false
	for i, edit := range edits {
		next, err := edit(cur)
		if err != nil {
			errs[i] = err
			continue
		}
		if changed && errors.Is(lim.FitsWrite(next), store.ErrTooLarge) {
			return cur, i, true
		}
		errs[i] = nil
		cur, changed = next, true
	}
	return cur, len(edits), changed
}

// writeEdits makes edits on the object of node, starting from the object
// as this allocator last saw it (or a read), in as many writes as the
// store's limits need (takeFitting). A conflict rereads the object and
// judges the edits not yet written again. errs[i] is nil for an edit
// written, edit i's own error for one left out, and err for the edits
// not written when a write failed with err (edits already written stay).
func (a *Allocator) writeEdits(ctx context.Context, op, node string, edits []nodeEdit) (errs []error, err error) {
	errs = make([]error, len(edits))
	for from := 0; from < len(edits); {
		end := from
		err = a.retry(ctx, op, func() error {
			n, known := a.lastKnown(node)
			if !known {
				var err error
				if n, err = a.readNode(ctx, node); err != nil {
					return err
				}
			}
			next, k, changed := a.takeFitting(n, edits[from:], errs[from:])
			if !changed && known {
				// Judged on a remembered object: judge again on a read.
				var err error
				if n, err = a.readNode(ctx, node); err != nil {
					return err
				}
				next, k, changed = a.takeFitting(n, edits[from:], errs[from:])
			}
			end = from + k
			if !changed {
				return nil
			}
			_, err := a.writeNode(ctx, next)
			return err
		})
		if err != nil {
			for i := from; i < len(edits); i++ {
				if i >= end || errs[i] == nil {
					errs[i] = err
				}
			}
			return errs, err
		}
		from = end
	}
	return errs, nil
}
