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

// ensureAttempts bounds how often Ensure runs Run when others (plugins on
// other nodes opening the same store) migrate meanwhile.
const ensureAttempts = 4

// Ensure brings s, which its opener found without the layout marker, to
// the typed layout: Run converts the first layout (or only writes the
// marker over typed objects stored before any; an empty store gets the
// marker alone). When Run fails its conditions because another process
// migrates meanwhile, the marker is read again (one Get): a store marked
// meanwhile is done. First-layout keys written during the conversion
// (ErrLateWrite) are left for `ipkeeperctl check` and logged; the store is
// typed all the same.
func Ensure(ctx context.Context, s kv.Store) error {
	for i := range ensureAttempts {
		if i > 0 {
			layout, err := kvbacked.ReadLayout(ctx, s)
			if err != nil {
				return err
			}
			if layout == kvbacked.LayoutTyped {
				return nil
			}
		}
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
			continue // another process migrates meanwhile: read the marker again
		default:
			return fmt.Errorf("migrate the first storage layout: %w", err)
		}
	}
	return fmt.Errorf("%w: the store kept changing while it was migrated (%d attempts)", store.ErrConflict, ensureAttempts)
}
