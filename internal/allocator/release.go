package allocator

import (
	"context"
	"errors"
	"net/netip"
	"slices"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/nodealloc"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// Release frees every address of handle id of node and drops its records
// and loans. Releasing a handle that does not exist is not an error: it
// returns no addresses. A handle the node's object does not know is
// looked for in store.UnaffineNode's object (imported without a node). In the common case (no loan) it is one write of
// the node's object; each lender's object a loan names is written first,
// and the loan dropped last, so that a release that stops half way still
// names what is left.
func (a *Allocator) Release(ctx context.Context, node, id string) ([]netip.Addr, error) {
	return a.releaseKeeping(ctx, node, id, false)
}

// errSticky: the handle to release has a sticky identity and the caller
// keeps such handles (ReleaseOrPark); nothing was written.
var errSticky = errors.New("sticky handle")

// releaseKeeping is Release; with keepSticky a handle with a sticky
// identity is left alone, with errSticky, before anything is written.
func (a *Allocator) releaseKeeping(ctx context.Context, node, id string, keepSticky bool) ([]netip.Addr, error) {
	if store.ValidName("node", node) != nil {
		return nil, nil // no object can hold it
	}
	defer a.lockNode(node)()
	var freed []netip.Addr
	err := a.retry(ctx, "release "+id, func() error {
		// An attempt that freed a lender's part and then conflicted on the
		// node's own object keeps what it freed: the retry does not find
		// that part again.
		got, err := a.release(ctx, node, id, keepSticky)
		freed = append(freed, got...)
		if err == nil && len(freed) == 0 {
			got, err = a.releaseUnaffine(ctx, id)
			freed = append(freed, got...)
		}
		return err
	})
	return freed, err
}

// releaseUnaffine frees handle id's record in store.UnaffineNode's object:
// allocations imported from whereabouts record no node, so the runtime's
// DEL of such a pod, from whatever node, finds its address there. It costs
// a DEL that found nothing in its node's object one read.
func (a *Allocator) releaseUnaffine(ctx context.Context, id string) ([]netip.Addr, error) {
	n, err := a.store.GetNode(ctx, store.UnaffineNode)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, storeErr(err)
	}
	if _, ok := n.Handle(id); !ok {
		return nil, nil
	}
	next, ips := nodealloc.Release(n, id)
	if _, err := a.writeNode(ctx, next); errors.Is(err, store.ErrDenied) {
		// A node's own credentials may not write the object of no node
		// (the Kubernetes datastore's per-node policy): the controller
		// releases the address once its pod is gone.
		a.log.Warn("release of an address held by no node refused to this node's credentials; the controller releases it once its pod is gone",
			"handle", id, "error", err)
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	return addrs(ips), nil
}

// release frees what it can of handle id and returns what it freed, also
// when it then fails.
func (a *Allocator) release(ctx context.Context, node, id string, keepSticky bool) (freed []netip.Addr, err error) {
	// The object as last seen (the plugin's open read it a moment ago) is
	// used when it names the handle: the write is a compare-and-swap on
	// its version, so a stale copy conflicts and is read again. That it
	// does not name the handle is never taken on trust: read.
	own, known := a.lastKnown(node)
	if !known || !hasRecord(own, id) && len(own.LendersOf(id)) == 0 {
		if own, err = a.readNode(ctx, node); err != nil {
			return nil, err
		}
	}
	if r, ok := own.Handle(id); ok && keepSticky && r.Sticky != "" {
		return nil, errSticky
	}
	for _, l := range own.LendersOf(id) {
		ln, err := a.store.GetNode(ctx, l)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return freed, storeErr(err)
		}
		r, ok := ln.Handle(id)
		if !ok || r.Node != node {
			continue
		}
		if keepSticky && r.Sticky != "" && len(freed) == 0 {
			return nil, errSticky
		}
		ln, ips := nodealloc.Release(ln, id)
		if _, err := a.writeNode(ctx, ln); err != nil {
			return freed, err
		}
		freed = append(freed, addrs(ips)...)
	}
	next, ips := nodealloc.Release(own, id)
	had := len(next.Loans)
	next.Loans = slices.DeleteFunc(slices.Clone(next.Loans), func(l store.Loan) bool { return l.Handle == id })
	if len(ips) == 0 && len(next.Loans) == had {
		return freed, nil
	}
	if _, err := a.writeNode(ctx, next); err != nil {
		return freed, err
	}
	return append(addrs(ips), freed...), nil
}

func addrs(ips []ipam.HandleIP) []netip.Addr {
	out := make([]netip.Addr, len(ips))
	for i, ip := range ips {
		out[i] = ip.Addr
	}
	return out
}

// Handle returns handle id of node, assembled from the node's object and
// the lenders' objects its loans name.
func (a *Allocator) Handle(ctx context.Context, node, id string) (ipam.Handle, bool, error) {
	own, err := a.readNode(ctx, node)
	if err != nil {
		return ipam.Handle{}, false, err
	}
	return a.handleOf(ctx, own, id)
}
