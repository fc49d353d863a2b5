package allocator

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/nodealloc"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// Sticky addresses.
//
// A handle with a sticky identity (ipam.Handle.Sticky) keeps its
// addresses when its attachment goes away: its DEL parks the records
// (ipam.Handle.Parked) instead of freeing them. The next ADD of the same
// identity, network and interface, on any node, gets them back: the
// parked record is renamed to the new handle in the object holding it,
// guarded by the record as observed — in place when that object is the
// new node's, else as a loan (the new node's object names the lender
// first, then the lender's record names the new node), as borrowing
// does. An identity held by a live attachment is never given to another
// (ErrStickyHeld). Only the controller frees a parked record, guarded
// by the record as observed, so a re-home and a release never both win.

// ErrStickyHeld means the sticky identity of the request is held by
// another live attachment (CNI 102): nothing was allocated.
var ErrStickyHeld = errors.New("sticky identity held by another live attachment")

// stickyAttempts bounds the rounds of AllocateSticky that lose a race
// for the identity and look again.
const stickyAttempts = 8

// StickyHolders lists the handles holding identity id for the
// attachment of network and ifname, live or parked (sorted by creation,
// then ID), from the node objects the store's index of the identity
// names (store.NodeSelector.Sticky: written with every record, so it
// misses none written since it exists); when those hold none, from one
// list of every node object, which finds records written before.
func (a *Allocator) StickyHolders(ctx context.Context, id, network, ifname string) ([]Observed, error) {
	nodes, err := a.store.ListNodes(ctx, store.NodeSelector{Sticky: id})
	if err != nil {
		return nil, storeErr(err)
	}
	if out := stickyHoldersIn(nodes, id, network, ifname); len(out) > 0 {
		return out, nil
	}
	if nodes, err = a.store.ListNodes(ctx, store.NodeSelector{}); err != nil {
		return nil, storeErr(err)
	}
	return stickyHoldersIn(nodes, id, network, ifname), nil
}

// stickyHoldersIn gathers the holders of identity id for network and
// ifname from the records of nodes.
func stickyHoldersIn(nodes []store.Node, id, network, ifname string) []Observed {
	byID := map[string]*Observed{}
	var ids []string
	for _, n := range nodes {
		for _, r := range n.Handles {
			if !r.SameSticky(id, network, ifname) {
				continue
			}
			o := byID[r.ID]
			if o == nil {
				o = &Observed{Handle: r}
				o.Handle.IPs = nil
				byID[r.ID] = o
				ids = append(ids, r.ID)
			}
			o.Handle.IPs = append(slices.Clone(o.Handle.IPs), r.IPs...)
			if !r.IsParked() {
				o.Handle.Parked = time.Time{}
			}
			o.Parts = append(o.Parts, ObservedPart{Object: n.Name, Record: r})
		}
	}
	out := make([]Observed, 0, len(ids))
	for _, id := range ids {
		out = append(out, *byID[id])
	}
	slices.SortFunc(out, func(x, y Observed) int {
		if c := x.Handle.Created.Compare(y.Handle.Created); c != 0 {
			return c
		}
		return strings.Compare(x.Handle.ID, y.Handle.ID)
	})
	return out
}

// heldErr names the live holder of an identity.
func heldErr(h ipam.Handle) error {
	who := "handle " + h.ID
	if h.Pod != "" {
		who += fmt.Sprintf(" of pod %s/%s", h.Namespace, h.Pod)
	}
	return fmt.Errorf("%w: %s is held by %s on node %q", ErrStickyHeld, h.Sticky, who, h.Node)
}

// AllocateSticky is Allocate for a request whose handle names a sticky
// identity: the parked addresses of the identity when it has some (on
// any node), else new ones recorded for it. It fails with ErrStickyHeld
// when another live attachment holds the identity. Two first allocations
// of one identity that race are told apart after their writes: each
// lists the identity's holders again, and one that sees another releases
// its addresses and, after a random pause, looks again. Of two such
// lists the later sees both writes, so at most one allocation keeps its
// addresses; when both yield, the pause lets one go first next time.
func (a *Allocator) AllocateSticky(ctx context.Context, req Request) (ipam.Handle, error) {
	id := req.Handle.Sticky
	if _, err := ipam.ParseStickyID(id); err != nil {
		return ipam.Handle{}, fmt.Errorf("allocate: %w", err)
	}
	req.Handle.Parked = time.Time{}
	for range stickyAttempts {
		holders, err := a.StickyHolders(ctx, id, req.Handle.Network, req.Handle.IfName)
		if err != nil {
			return ipam.Handle{}, err
		}
		var parked []Observed
		var mine *Observed
		for _, o := range holders {
			switch {
			case o.Handle.ID == req.Handle.ID:
				mine = &o
			case !o.Handle.IsParked() && (req.Handle.PodUID == "" || o.Handle.PodUID != req.Handle.PodUID):
				return ipam.Handle{}, heldErr(o.Handle)
			default:
				parked = append(parked, o)
			}
		}
		if srcs := rehomeSources(mine, parked, len(req.Sets)); srcs != nil {
			h, err := a.rehome(ctx, req, srcs)
			if errors.Is(err, ErrHandleChanged) || errors.Is(err, store.ErrConflict) {
				continue
			}
			return h, err
		}
		if mine != nil {
			return a.Allocate(ctx, req) // a repeated ADD: as stored
		}
		h, err := a.Allocate(ctx, req)
		if err != nil {
			return ipam.Handle{}, err
		}
		lost, err := a.lostStickyRace(ctx, h)
		if err != nil || !lost {
			return h, err
		}
		if _, err := a.Release(ctx, h.Node, h.ID); err != nil {
			return ipam.Handle{}, err
		}
		select {
		case <-ctx.Done():
			return ipam.Handle{}, ctx.Err()
		case <-time.After(time.Duration(1+rand.IntN(20)) * time.Millisecond):
		}
	}
	return ipam.Handle{}, fmt.Errorf("%w: sticky identity %s", ErrContended, id)
}

// lostStickyRace reports whether h, just allocated for its identity,
// must give way: another handle holds the identity.
func (a *Allocator) lostStickyRace(ctx context.Context, h ipam.Handle) (bool, error) {
	holders, err := a.StickyHolders(ctx, h.Sticky, h.Network, h.IfName)
	if err != nil {
		return false, err
	}
	for _, o := range holders {
		if o.Handle.ID != h.ID {
			return true, nil
		}
	}
	return false, nil
}

// rehomeSources returns the handles whose addresses the request of sets
// range sets takes, nil when it takes none: the newest reservation (or an
// earlier sandbox of the same pod, whose runtime starts one sandbox at a
// time), and older ones while together they hold fewer addresses than
// the request has sets — the halves of a dual-stack reservation that a
// re-home which stopped between its writes left under two handles; mine,
// the request's own handle, first when it holds fewer addresses than
// sets (such a re-home of it, resumed). Older full reservations, if a
// crash left any, are the controller's to free.
func rehomeSources(mine *Observed, parked []Observed, sets int) []Observed {
	var srcs []Observed
	n := 0
	if mine != nil {
		if len(mine.Handle.IPs) >= sets || len(parked) == 0 {
			return nil
		}
		srcs, n = append(srcs, *mine), len(mine.Handle.IPs)
	}
	for i := len(parked) - 1; i >= 0 && (len(srcs) == 0 || n < sets); i-- {
		srcs, n = append(srcs, parked[i]), n+len(parked[i].Handle.IPs)
	}
	return srcs
}

// rehome gives req's handle the addresses of the handles srcs (parked,
// or req's own handle partly re-homed): the requesting node's object
// first names every other object holding one of their records as a
// lender (one write), then each record is renamed to the new handle and
// node in the object holding it, guarded by the record as observed —
// the lenders' first, the node's own last. The old node's loans of the
// records that moved are dropped last. The addresses must satisfy the
// request (matchSets). A re-home that fails before its first rename
// drops the loans it added; one that fails after leaves the new handle
// with the records renamed so far, which the ADD's retry completes (or
// its DEL parks, and the next ADD gathers both halves).
func (a *Allocator) rehome(ctx context.Context, req Request, srcs []Observed) (ipam.Handle, error) {
	node := req.Handle.Node
	h := req.Handle
	h.Created = a.Now().UTC()
	h.Parked = time.Time{}
	var parts []ObservedPart
	all := srcs[len(srcs)-1].Handle // the newest reservation names the refusal
	all.IPs = nil
	for _, o := range srcs {
		all.IPs = append(all.IPs, o.Handle.IPs...)
		parts = append(parts, o.Parts...)
	}
	pools, err := a.requestPools(ctx, req)
	if err != nil {
		return ipam.Handle{}, err
	}
	ips, err := matchSets(req, all, pools)
	if err != nil {
		return ipam.Handle{}, fmt.Errorf("sticky %s: %w", h.Sticky, err)
	}
	// The node's own object last: a record there needs no loan.
	slices.SortStableFunc(parts, func(x, y ObservedPart) int {
		return boolOrder(x.Object == node) - boolOrder(y.Object == node)
	})
	var lenders []string
	for _, p := range parts {
		if p.Object != node && !slices.Contains(lenders, p.Object) {
			lenders = append(lenders, p.Object)
		}
	}
	if len(lenders) > 0 {
		unlock := a.lockNode(node)
		err = a.retry(ctx, "loan for "+h.ID, func() error {
			own, err := a.readNode(ctx, node)
			if err != nil {
				return err
			}
			have := own.LendersOf(h.ID)
			var add []store.Loan
			for _, l := range lenders {
				if !slices.Contains(have, l) {
					add = append(add, store.Loan{Handle: h.ID, Lender: l})
				}
			}
			if len(add) == 0 {
				return nil
			}
			own = nodealloc.Clone(own)
			own.Loans = append(own.Loans, add...)
			_, err = a.writeNode(ctx, own)
			return err
		})
		unlock()
		if err != nil {
			return ipam.Handle{}, err
		}
	}
	renamed := 0
	for _, p := range parts {
		if p.Record.ID == h.ID {
			continue // re-homed by an earlier attempt
		}
		if err = a.renamePart(ctx, p, h, ips); err != nil {
			break
		}
		renamed++
	}
	if err != nil {
		if renamed == 0 && !slices.ContainsFunc(parts, func(p ObservedPart) bool { return p.Record.ID == h.ID }) {
			// Drop the loans again; no record was renamed.
			if _, uerr := a.Release(ctx, node, h.ID); uerr != nil {
				err = errors.Join(err, fmt.Errorf("undoing the loan: %w", uerr))
			}
		}
		return ipam.Handle{}, err
	}
	for _, o := range srcs {
		if o.Handle.ID != h.ID && slices.ContainsFunc(o.Parts, func(p ObservedPart) bool { return p.Object != p.Record.Node }) {
			a.dropOldLoans(ctx, o.Handle)
		}
	}
	h.IPs = ips
	from := make([]string, len(srcs))
	for i, o := range srcs {
		from[i] = o.Handle.ID
	}
	a.log.Info("sticky addresses re-homed", "identity", h.Sticky, "from", strings.Join(from, ","), "node", all.Node, "to", h.ID, "on", node)
	return h, nil
}

// dropOldLoans drops the loans of old, a handle whose records moved to
// another, that name lenders without a record of it: those of the
// records that moved and any a stopped re-home added. Failing, it logs:
// 'ipkeeperctl check --repair' drops them too.
func (a *Allocator) dropOldLoans(ctx context.Context, old ipam.Handle) {
	own, err := a.readNode(ctx, old.Node)
	if err == nil {
		for _, l := range own.LendersOf(old.ID) {
			if err = a.dropLoanOf(ctx, old.Node, old.ID, l); err != nil {
				break
			}
		}
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		a.log.Warn("sticky address moved; dropping the old node's loan failed ('ipkeeperctl check --repair' drops it)",
			"handle", old.ID, "node", old.Node, "error", err)
	}
}

// renamePart renames the record of part p to handle h, guarded by the
// record as observed, its addresses ordered as ips (the request's); in
// another node's object it checks that the object's node still claims
// the blocks of the addresses.
func (a *Allocator) renamePart(ctx context.Context, p ObservedPart, h ipam.Handle, ips []ipam.HandleIP) error {
	var mine []ipam.HandleIP
	for _, ip := range ips {
		if slices.ContainsFunc(p.Record.IPs, func(r ipam.HandleIP) bool { return r.Addr == ip.Addr }) {
			mine = append(mine, ip)
		}
	}
	if p.Object == h.Node {
		defer a.lockNode(h.Node)()
	}
	return a.retry(ctx, "re-home "+p.Record.ID, func() error {
		n, err := a.readNode(ctx, p.Object)
		if err != nil {
			return err
		}
		next, err := nodealloc.Rename(n, p.Record, h)
		switch {
		case errors.Is(err, nodealloc.ErrChanged), errors.Is(err, nodealloc.ErrNotHeld):
			return fmt.Errorf("%w: %w", ErrHandleChanged, err)
		case err != nil:
			return err
		}
		i := slices.IndexFunc(next.Handles, func(r ipam.Handle) bool { return r.ID == h.ID })
		next.Handles[i].IPs = mine
		if p.Object != h.Node {
			for _, ip := range mine {
				if err := a.verifyLent(ctx, p.Object, store.BlockRef{Pool: ip.Pool, CIDR: ip.Block}); err != nil {
					return err
				}
			}
		}
		_, err = a.writeNode(ctx, next)
		return err
	})
}

// ReleaseOrPark is the DEL of an attachment: a handle with a sticky
// identity is parked (every record keeps its addresses, marked with the
// time), any other is released (Release). A parked handle stays as it
// is, and one whose records another attachment of its identity took
// meanwhile keeps only what is left. It returns the addresses freed or
// parked and whether they were parked.
func (a *Allocator) ReleaseOrPark(ctx context.Context, node, id string) ([]netip.Addr, bool, error) {
	freed, err := a.releaseKeeping(ctx, node, id, true)
	if !errors.Is(err, errSticky) {
		return freed, false, err
	}
	for range stickyAttempts {
		own, err := a.readNode(ctx, node)
		if err != nil {
			return nil, false, err
		}
		h, parts, found, err := a.handleParts(ctx, own, id)
		if err != nil || !found {
			return nil, false, err
		}
		// A record changed meanwhile (parked by the controller, taken by
		// the identity's next attachment): look again; what is left of
		// the handle is parked, or nothing is.
		err = a.ParkObserved(ctx, Observed{Handle: h, Parts: parts}, a.Now().UTC())
		if !errors.Is(err, ErrHandleChanged) {
			return addrs(h.IPs), true, err
		}
	}
	return nil, false, fmt.Errorf("%w: parking sticky handle %s", ErrContended, id)
}

// ParkObserved parks every record of the observed sticky handle o that
// is not parked yet, each guarded by the record as observed: the
// lenders' first, the node's own last. A record changed meanwhile fails
// with ErrHandleChanged.
func (a *Allocator) ParkObserved(ctx context.Context, o Observed, at time.Time) error {
	parts := slices.Clone(o.Parts)
	slices.SortStableFunc(parts, func(x, y ObservedPart) int {
		return boolOrder(x.Object == o.Handle.Node) - boolOrder(y.Object == o.Handle.Node)
	})
	for _, p := range parts {
		if p.Record.Sticky == "" || p.Record.IsParked() {
			continue
		}
		err := a.retry(ctx, "park "+o.Handle.ID, func() error {
			n, err := a.readNode(ctx, p.Object)
			if err != nil {
				return err
			}
			r, ok := n.Handle(p.Record.ID)
			if !ok || !nodealloc.Same(r, p.Record) {
				return fmt.Errorf("%w: %s in node object %q", ErrHandleChanged, p.Record.ID, p.Object)
			}
			n = nodealloc.Clone(n)
			i := slices.IndexFunc(n.Handles, func(r ipam.Handle) bool { return r.ID == p.Record.ID })
			n.Handles[i].Parked = at
			_, err = a.writeNode(ctx, n)
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// ReleaseParked frees the parked sticky handle o as observed
// (ReleaseObserved: a record re-homed or changed since is left alone,
// ErrHandleChanged), then drops the loans its node kept for the records
// freed in other nodes' objects.
func (a *Allocator) ReleaseParked(ctx context.Context, o Observed) ([]netip.Addr, error) {
	if !o.Handle.IsParked() {
		return nil, fmt.Errorf("%w: handle %s is not a parked sticky reservation", ErrHandleChanged, o.Handle.ID)
	}
	freed, err := a.ReleaseObserved(ctx, o)
	if err != nil {
		return freed, err
	}
	for _, p := range o.Parts {
		if p.Object != o.Handle.Node {
			if err := a.dropLoanOf(ctx, o.Handle.Node, o.Handle.ID, p.Object); err != nil {
				return freed, err
			}
		}
	}
	return freed, nil
}
