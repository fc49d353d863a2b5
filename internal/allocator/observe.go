package allocator

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/nodealloc"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// Observed is a handle as one read of the node objects found it: the
// handle assembled from all its records, and each record with the object
// that holds it (the node's own, and lenders').
type Observed struct {
	Handle ipam.Handle
	Parts  []ObservedPart
}

// ObservedPart is one record of a handle as read, in object Object.
type ObservedPart struct {
	Object string
	Record ipam.Handle
}

// ObserveHandles lists every handle of the store, assembled from its
// records (and, holding nothing, those that only a loan names), sorted by
// node then ID. An object that cannot be decoded fails
// the whole list (ErrCorrupt): a reconciler must not decide on a partial
// view.
func (a *Allocator) ObserveHandles(ctx context.Context) ([]Observed, error) {
	nodes, err := a.store.ListNodes(ctx, store.NodeSelector{})
	if err != nil {
		return nil, storeErr(err)
	}
	type key struct{ node, id string }
	byKey := map[key]*Observed{}
	var keys []key
	for _, n := range nodes {
		for _, r := range n.Handles {
			k := key{r.Node, r.ID}
			o := byKey[k]
			if o == nil {
				o = &Observed{Handle: r}
				o.Handle.IPs = nil
				byKey[k] = o
				keys = append(keys, k)
			}
			if n.Name == r.Node {
				// The node's own record carries the handle's attributes.
				ips := o.Handle.IPs
				o.Handle = r
				o.Handle.IPs = append(slices.Clone(r.IPs), ips...)
			} else {
				o.Handle.IPs = append(o.Handle.IPs, r.IPs...)
			}
			o.Parts = append(o.Parts, ObservedPart{Object: n.Name, Record: r})
		}
	}
	// Loans whose handle has no record anywhere: what an ADD killed
	// between its writes leaves. They are handles too, holding nothing,
	// so that GC and the controller release them like any other.
	for _, n := range nodes {
		for _, l := range n.Loans {
			k := key{n.Name, l.Handle}
			if byKey[k] != nil {
				continue
			}
			o := &Observed{Handle: ipam.Handle{ID: l.Handle, Node: n.Name}}
			o.Handle.Network, o.Handle.ContainerID, o.Handle.IfName, _ = ipam.ParseHandleID(l.Handle)
			byKey[k] = o
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(x, y key) int {
		if c := strings.Compare(x.node, y.node); c != 0 {
			return c
		}
		return strings.Compare(x.id, y.id)
	})
	out := make([]Observed, len(keys))
	for i, k := range keys {
		out[i] = *byKey[k]
	}
	return out, nil
}

// ReleaseObserved releases the handle o observed: each record as observed,
// the lenders' first and the node's own last together with its loans, one
// object at a time. A record that is gone or no longer as observed
// (released meanwhile, perhaps allocated again under the same ID) fails
// with ErrHandleChanged and is not touched: an address released and handed
// out again since the observation is never freed. Conflicts with other
// writes to an object are retried from a fresh read, still guarded by the
// observed record.
func (a *Allocator) ReleaseObserved(ctx context.Context, o Observed) ([]netip.Addr, error) {
	parts := slices.Clone(o.Parts)
	slices.SortStableFunc(parts, func(x, y ObservedPart) int {
		return boolOrder(x.Object == o.Handle.Node) - boolOrder(y.Object == o.Handle.Node)
	})
	if len(parts) == 0 {
		return nil, a.dropLoans(ctx, o.Handle)
	}
	var freed []netip.Addr
	for _, p := range parts {
		err := a.retry(ctx, "release "+o.Handle.ID, func() error {
			n, err := a.readNode(ctx, p.Object)
			if err != nil {
				return err
			}
			next, ips, err := releaseObservedRecord(n, p.Record, p.Object == o.Handle.Node)
			if err != nil {
				return err
			}
			if _, err := a.writeNode(ctx, next); err != nil {
				return err
			}
			freed = append(freed, addrs(ips)...)
			return nil
		})
		if err != nil {
			return freed, err
		}
	}
	return freed, nil
}

// releaseObservedRecord frees record rec of object n while it is as
// observed (ErrHandleChanged otherwise, or when it is gone), and with own
// (n is the handle's node's object) drops the handle's loans too.
func releaseObservedRecord(n store.Node, rec ipam.Handle, own bool) (store.Node, []ipam.HandleIP, error) {
	next, ips, err := nodealloc.ReleaseObserved(n, rec)
	switch {
	case errors.Is(err, nodealloc.ErrChanged):
		return n, nil, fmt.Errorf("%w: %w", ErrHandleChanged, err)
	case err != nil:
		return n, nil, err
	case len(ips) == 0:
		return n, nil, fmt.Errorf("%w: handle %s was released meanwhile", ErrHandleChanged, rec.ID)
	}
	if own {
		next.Loans = slices.DeleteFunc(slices.Clone(next.Loans), func(l store.Loan) bool { return l.Handle == rec.ID })
	}
	return next, ips, nil
}

func boolOrder(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TakeoverCandidates lists the handles the attachment h may take over:
// earlier sandboxes of the same pod and interface on the same node and
// network (takeoverIdentity), with all their addresses in the node's own
// object (a handle with borrowed parts is no candidate: it could not
// change owner in one write). Newest first, then by ID.
func (a *Allocator) TakeoverCandidates(ctx context.Context, h ipam.Handle) ([]Observed, error) {
	if h.PodUID == "" {
		return nil, nil
	}
	own, err := a.readNode(ctx, h.Node)
	if err != nil {
		return nil, err
	}
	var out []Observed
	for _, r := range own.Handles {
		if r.Node != h.Node || len(own.LendersOf(r.ID)) > 0 || takeoverIdentity(h, r) != nil {
			continue
		}
		out = append(out, Observed{Handle: r, Parts: []ObservedPart{{Object: own.Name, Record: r}}})
	}
	slices.SortFunc(out, func(x, y Observed) int {
		if c := y.Handle.Created.Compare(x.Handle.Created); c != 0 {
			return c
		}
		return strings.Compare(x.Handle.ID, y.Handle.ID)
	})
	return out, nil
}

// TakeOver gives the attachment of req the addresses of the observed
// handle old — an earlier sandbox's allocation of the same pod and
// interface — in one write of the node's object: the record changes owner
// in place (no free queue changes), guarded by the record as observed.
// Old's addresses are taken all or none, only when they satisfy the
// request exactly (matchSets); otherwise ErrTakeoverRefused. When old is
// gone or changed it fails with ErrHandleChanged. The caller must have
// proven that old's network namespace is gone.
func (a *Allocator) TakeOver(ctx context.Context, req Request, old Observed) (ipam.Handle, error) {
	if req.Handle.ID == "" || store.ValidName("node", req.Handle.Node) != nil {
		return ipam.Handle{}, fmt.Errorf("take over: handle ID and a node name without '/' are required (node %q)", req.Handle.Node)
	}
	if len(old.Parts) != 1 || old.Parts[0].Object != req.Handle.Node {
		return ipam.Handle{}, fmt.Errorf("%w: handle %s has addresses outside node %q's object", ErrTakeoverRefused, old.Handle.ID, req.Handle.Node)
	}
	if err := takeoverIdentity(req.Handle, old.Handle); err != nil {
		return ipam.Handle{}, err
	}
	defer a.lockNode(req.Handle.Node)()
	var out ipam.Handle
	err := a.retry(ctx, "take over "+old.Handle.ID, func() error {
		own, err := a.readNode(ctx, req.Handle.Node)
		if err != nil {
			return err
		}
		if _, taken, err := a.handleOf(ctx, own, req.Handle.ID); err != nil || taken {
			if err == nil {
				err = fmt.Errorf("%w: attachment %s holds an allocation already", ErrTakeoverRefused, req.Handle.ID)
			}
			return err
		}
		pools, err := a.requestPools(ctx, req)
		if err != nil {
			return err
		}
		ips, err := matchSets(req, old.Parts[0].Record, pools)
		if err != nil {
			return err
		}
		for _, ip := range ips {
			if !pools[ip.Pool].Permits(ip.Addr) {
				return fmt.Errorf("%w: %s is no longer permitted by pool %q", ErrTakeoverRefused, ip.Addr, ip.Pool)
			}
		}
		h := req.Handle
		h.Created = a.Now().UTC()
		next, err := nodealloc.Rename(own, old.Parts[0].Record, h)
		switch {
		case errors.Is(err, nodealloc.ErrChanged), errors.Is(err, nodealloc.ErrNotHeld):
			return fmt.Errorf("%w: %w", ErrHandleChanged, err)
		case err != nil:
			return err
		}
		// The record lists the addresses in the order of the request's
		// range sets, as an allocation would.
		i := slices.IndexFunc(next.Handles, func(r ipam.Handle) bool { return r.ID == h.ID })
		next.Handles[i].IPs = ips
		if err := a.verifyOwn(ctx, next, ownBlocks(next, h.ID), nil); err != nil {
			return err
		}
		if _, err := a.writeNode(ctx, next); err != nil {
			return err
		}
		h.IPs = ips
		out = h
		return nil
	})
	return out, err
}

// FreeNodeBlocks frees the blocks of a node that is gone: each empty block
// leaves the node's object (as many in one write as the store's limits
// allow), then its claim is deleted (so that a crash in between leaves a
// claim that the next call, or check, finds); an object left with
// nothing is deleted. Blocks that hold addresses are kept, with their
// claims, until those are released. Claims of the node whose block its
// object does not hold are deleted too (Dropped). Only call it for a node
// that is gone.
func (a *Allocator) FreeNodeBlocks(ctx context.Context, node string) (NodeCleanup, error) {
	var out NodeCleanup
	if err := store.ValidName("node", node); err != nil {
		return out, fmt.Errorf("free node blocks: %w", err)
	}
	own, err := a.readNode(ctx, node)
	if err != nil {
		return out, err
	}
	var empty []NodeBlock
	var edits []nodeEdit
	for _, b := range own.Blocks {
		nb := NodeBlock{Pool: b.Pool, Block: b.CIDR}
		if b.InUse() > 0 {
			out.Kept = append(out.Kept, nb)
			continue
		}
		empty = append(empty, nb)
		edits = append(edits, func(n store.Node) (store.Node, error) {
			return nodealloc.RemoveBlock(n, store.BlockRef{Pool: nb.Pool, CIDR: nb.Block})
		})
	}
	errs, err := a.writeEdits(ctx, "free blocks of node "+node, node, edits)
	for i, e := range errs {
		switch {
		case e == nil:
			out.Freed = append(out.Freed, empty[i])
		case errors.Is(e, nodealloc.ErrTaken):
			out.Kept = append(out.Kept, empty[i]) // allocated since the read
		}
	}
	if err != nil {
		return out, err
	}
	err = a.retry(ctx, "free claims of node "+node, func() error {
		out.Dropped = nil
		cur, err := a.readNode(ctx, node)
		if err != nil {
			return err
		}
		claims, err := a.store.ListClaims(ctx, store.ClaimSelector{Node: node})
		if err != nil {
			return err
		}
		for _, c := range claims {
			if _, held := cur.Block(c.BlockRef); held {
				continue
			}
			if err := a.deleteClaim(ctx, c); err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
			if !slices.Contains(out.Freed, NodeBlock{Pool: c.Pool, Block: c.CIDR}) {
				out.Dropped = append(out.Dropped, NodeBlock{Pool: c.Pool, Block: c.CIDR})
			}
		}
		return nil
	})
	return out, err
}

// AffineNodes returns every node that holds blocks, with how many.
func (a *Allocator) AffineNodes(ctx context.Context) (map[string]int, error) {
	claims, err := a.store.ListClaims(ctx, store.ClaimSelector{})
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, c := range claims {
		out[c.Node]++
	}
	return out, nil
}

// Handles returns every handle, assembled from its records, sorted by node
// then ID.
func (a *Allocator) Handles(ctx context.Context) ([]ipam.Handle, error) {
	obs, err := a.ObserveHandles(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]ipam.Handle, len(obs))
	for i, o := range obs {
		out[i] = o.Handle
	}
	return out, nil
}

// dropLoans releases a handle that only loans name (an ADD killed between
// its writes): its loans go, unless a record of it exists by now.
func (a *Allocator) dropLoans(ctx context.Context, h ipam.Handle) error {
	return a.retry(ctx, "release "+h.ID, func() error {
		own, err := a.readNode(ctx, h.Node)
		if err != nil {
			return err
		}
		got, found, err := a.handleOf(ctx, own, h.ID)
		switch {
		case err != nil:
			return err
		case !found:
			return nil
		case len(got.IPs) > 0:
			return fmt.Errorf("%w: handle %s holds addresses now", ErrHandleChanged, h.ID)
		}
		next := nodealloc.Clone(own)
		next.Loans = slices.DeleteFunc(next.Loans, func(l store.Loan) bool { return l.Handle == h.ID })
		_, err = a.writeNode(ctx, next)
		return err
	})
}
