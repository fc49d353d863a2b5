package kube

import (
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// TestPoolStickyStored: a pool's Sticky flag survives the API server (the
// IPAMPool schema of deploy/crds.yaml keeps it; a field the schema lacks
// is pruned) through a create, a read, a list and an update that clears
// it.
func TestPoolStickyStored(t *testing.T) {
	st := openStore(t)
	ctx := ctxT(t)
	spec := pool4
	spec.Sticky = true
	created, err := st.CreatePool(ctx, store.Pool{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	got, err := st.GetPool(ctx, spec.Name)
	if err != nil || !got.Spec.Sticky {
		t.Fatalf("GetPool after creating a sticky pool: Sticky %v, %v; want true", got.Spec.Sticky, err)
	}
	all, err := st.ListPools(ctx)
	if err != nil || len(all) != 1 || !all[0].Spec.Sticky {
		t.Fatalf("ListPools: %+v, %v; want the sticky pool", all, err)
	}
	created.Spec.Sticky = false
	if _, err := st.UpdatePool(ctx, created); err != nil {
		t.Fatal(err)
	}
	if got, err := st.GetPool(ctx, spec.Name); err != nil || got.Spec.Sticky {
		t.Fatalf("GetPool after clearing Sticky: %v, %v; want false", got.Spec.Sticky, err)
	}
}
