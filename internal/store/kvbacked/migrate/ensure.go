package migrate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
)

// ensureAttempts bounds how often Ensure runs Run or Split when others
// (plugins on other nodes opening the same store) migrate meanwhile.
const ensureAttempts = 4

// Ensure brings s, which its opener found without this layout's marker,
// to this layout. By the marker (one Get):
//   - none: Run converts the first layout (or only writes the marker over
//     typed objects stored before any; an empty store gets the marker
//     alone);
//   - the layout of whole node objects (kvbacked.WholeNodesMarkerValue):
//     Split splits them into parts;
//   - this layout's: Run and Split finish what a migration that stopped
//     after the marker left (first-layout keys, whole keys of split
//     nodes).
//
// When Run or Split fails its conditions because another process
// migrates meanwhile, the marker is read again: a store marked with this
// layout's value meanwhile is done. First-layout keys written during the
// conversion (ErrLateWrite) and whole keys of node objects written after
// the split (ErrLateNode) are left for `ipkeeperctl check` and logged; the
// store is of this layout all the same.
func Ensure(ctx context.Context, s kv.Store) error {
	layout, err := kvbacked.ReadLayout(ctx, s)
	if err != nil {
		return err
	}
	return EnsureRead(ctx, s, layout)
}

// EnsureRead is Ensure of a store whose marker its caller has just read
// (kvbacked.ReadLayoutWarm): the first attempt does not read it again.
func EnsureRead(ctx context.Context, s kv.Store, layout kvbacked.Layout) error {
	for i := range ensureAttempts {
		if i > 0 {
			var err error
			if layout, err = kvbacked.ReadLayout(ctx, s); err != nil {
				return err
			}
		}
		var err error
		switch {
		case layout == kvbacked.LayoutTyped && i > 0:
			return nil
		case layout == kvbacked.LayoutWholeNodes:
			err = split(ctx, s)
		case layout == kvbacked.LayoutTyped:
			if err = runFirst(ctx, s); err == nil {
				err = split(ctx, s)
			}
		default:
			err = runFirst(ctx, s)
		}
		if !errors.Is(err, store.ErrConflict) {
			return err
		}
		// another process migrates meanwhile: read the marker again
	}
	return fmt.Errorf("%w: the store kept changing while it was migrated (%d attempts)", store.ErrConflict, ensureAttempts)
}

// runFirst is Ensure's Run: nil when the store is of this layout, an
// error wrapping store.ErrConflict when it is to be read again.
func runFirst(ctx context.Context, s kv.Store) error {
	rep, err := Run(ctx, s)
	switch {
	case err == nil:
		if rep.Nodes+rep.Claims+rep.Handles+rep.Pools+rep.Deleted > 0 {
			slog.Default().Info("datastore: migrated the first storage layout", "nodes", rep.Nodes, "claims", rep.Claims,
				"handles", rep.Handles, "pools", rep.Pools, "fenced", rep.Fenced, "deleted", rep.Deleted,
				"orphans", rep.Orphans, "strays", rep.Strays, "unaffine", rep.UnaffineBlocks, "dropped", rep.DroppedBlocks)
		}
		return nil
	case errors.Is(err, ErrLateWrite):
		// The marker is written: the typed objects are the truth.
		slog.Default().Warn("datastore: first-layout keys written during the migration were left in place", "keys", rep.Late, "err", err)
		return nil
	case errors.Is(err, store.ErrConflict):
		return err
	default:
		return fmt.Errorf("migrate the first storage layout: %w", err)
	}
}

// split is Ensure's Split, as runFirst is its Run.
func split(ctx context.Context, s kv.Store) error {
	rep, err := Split(ctx, s)
	switch {
	case err == nil:
		if rep.Nodes+rep.Deleted > 0 || rep.Marked {
			slog.Default().Info("datastore: split node objects into parts", "nodes", rep.Nodes, "written", rep.Written,
				"marked", rep.Marked, "deleted", rep.Deleted)
		}
		return nil
	case errors.Is(err, ErrLateNode):
		slog.Default().Warn("datastore: node objects of the earlier layout written after the split were left in place", "keys", rep.Late, "err", err)
		return nil
	case errors.Is(err, store.ErrConflict):
		return err
	default:
		return fmt.Errorf("split node objects into parts: %w", err)
	}
}
