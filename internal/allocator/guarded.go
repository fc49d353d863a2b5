package allocator

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// ErrHandleChanged means a handle is not what the caller observed any
// more: it was released, or released and allocated again, or rewritten.
// Nothing was released.
var ErrHandleChanged = errors.New("handle changed since it was observed")

// Observed is a handle as one read of the datastore found it: its record,
// the key it is stored under and that key's version.
type Observed struct {
	Handle  ipam.Handle
	Key     string
	Version int64
}

// ObserveHandles lists every handle with the key and version it was read
// at, sorted by key. A record that cannot be decoded fails the whole list
// (ErrCorrupt): a reconciler must not decide on a partial view.
func (a *Allocator) ObserveHandles(ctx context.Context) ([]Observed, error) {
	es, err := a.store.List(ctx, HandlePrefix)
	if err != nil {
		return nil, err
	}
	out := make([]Observed, 0, len(es))
	for _, e := range es {
		h, err := decode[ipam.Handle](e)
		if err != nil {
			return nil, err
		}
		out = append(out, Observed{Handle: h, Key: e.Key, Version: e.Version})
	}
	return out, nil
}

// ReleaseObserved releases the handle o observed — every address its
// blocks give it, and the handle record — in one transaction guarded by
// the handle's version as observed and the versions of the blocks it
// changes. When the handle is gone or is not at the observed version any
// more (released meanwhile, perhaps allocated again under the same ID, or
// rewritten), it fails with ErrHandleChanged and changes nothing: an
// address released and handed out again since the observation is never
// touched. Conflicts on blocks (other allocations in them) are retried
// from a fresh read, still guarded by the observed version.
func (a *Allocator) ReleaseObserved(ctx context.Context, o Observed) ([]netip.Addr, error) {
	if !strings.HasPrefix(o.Key, HandlePrefix) || o.Version == 0 {
		return nil, fmt.Errorf("release observed handle %q: not an observed handle (key %q, version %d)", o.Handle.ID, o.Key, o.Version)
	}
	var freed []netip.Addr
	err := a.retry(ctx, "release "+o.Handle.ID, func() error {
		var err error
		freed, err = a.releaseObservedOnce(ctx, o)
		return err
	})
	return freed, err
}

func (a *Allocator) releaseObservedOnce(ctx context.Context, o Observed) ([]netip.Addr, error) {
	es, err := a.store.Get(ctx, o.Key)
	if err != nil {
		return nil, err
	}
	e := es[0]
	if e.Version == 0 {
		return nil, fmt.Errorf("%w: handle %s was released meanwhile", ErrHandleChanged, o.Handle.ID)
	}
	if e.Version != o.Version {
		return nil, fmt.Errorf("%w: handle %s was written again since it was observed (version %d, observed %d)", ErrHandleChanged, o.Handle.ID, e.Version, o.Version)
	}
	h, err := decode[ipam.Handle](e)
	if err != nil {
		return nil, err
	}
	if !sameAllocation(h, o.Handle) {
		// The version says it is the same record; a store whose versions
		// could say so wrongly must still not make this release another's.
		return nil, fmt.Errorf("%w: handle %s holds another allocation than observed", ErrHandleChanged, o.Handle.ID)
	}
	return a.commitRelease(ctx, a.newPlan(), o.Key, o.Version, h, strings.TrimPrefix(o.Key, HandlePrefix))
}

// sameAllocation reports whether two records of a handle describe the
// same allocation: same attachment, pod, creation time and addresses.
func sameAllocation(x, y ipam.Handle) bool {
	return x.ID == y.ID && x.Network == y.Network && x.ContainerID == y.ContainerID && x.IfName == y.IfName &&
		x.Node == y.Node && x.Namespace == y.Namespace && x.Pod == y.Pod && x.PodUID == y.PodUID &&
		x.Created.Equal(y.Created) && slices.Equal(x.IPs, y.IPs)
}
