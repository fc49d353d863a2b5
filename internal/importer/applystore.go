package importer

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/nodealloc"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// storeAttempts bounds how often ApplyStore redoes the write of one node
// object that changed under it (allocations running meanwhile).
const storeAttempts = 20

// ApplyStore is Apply on the typed datastore (package store): it writes
// plan's pools, then, per node object nodealloc.Assemble makes of its
// blocks and handles, the object's claims and the object, merged into what
// the store holds. Blocks of no node (whereabouts has no nodes) go to
// store.UnaffineNode's object, as Migrate puts them; those holding no
// address are left unclaimed (free) with a warning. A handle whose
// address is in another node's block gets a record in that node's object
// and a loan in its own node's object, as an allocation would.
//
// Objects held as the plan has them are left alone, so a second run
// reports everything present and writes nothing;
// anything that disagrees with stored state — a pool of the same name with
// another CIDR or block size, a pool of another name overlapping, a block
// claimed by another node, an imported address held by someone else, a
// handle holding other addresses — fails the whole import with
// ErrConflict before anything is written, and so does invalid input
// (ErrInvalidSource) or a node object the store cannot take. An imported
// address free in a stored block whose handle has no record there is
// what an import cut short leaves: the import takes it. With dryRun
// nothing is written.
//
// Node objects are merged by compare-and-swap, so the import may run while
// pods are being allocated: an object written meanwhile is read again and
// merged again (failing with ErrConflict if it now disagrees).
//
// Write order, and what a crash at each point leaves (a rerun completes
// every case, since each step is idempotent):
//
//  1. pools: pools without blocks.
//  2. loans, into the borrowers' objects: loans whose lenders hold no
//     record yet, which name their handle and node (an ADD retry or DEL
//     of the handle drops them, as after an allocation that stopped
//     between its writes).
//  3. per node object, in name order: its claims, then the object, in
//     as many writes as the store's write limits need (mergeInto). A
//     crash between leaves claims naming the node whose object lacks
//     their blocks; until the rerun, that node's next ADD adopts such a
//     claim as an empty block and could hand out an imported address
//     (the rerun then fails with ErrConflict naming it). No address has
//     two owners in the store at any point: only the object a claim names
//     holds a block, and it changes only by compare-and-swap.
func ApplyStore(ctx context.Context, s store.Store, plan *Plan, dryRun bool) (Result, error) {
	res := newResult(plan, dryRun)
	if err := plan.Validate(); err != nil {
		return res, err
	}
	for _, p := range plan.Pools {
		if err := store.ValidName("pool", p.Name); err != nil {
			return res, fmt.Errorf("%w: %w", ErrInvalidSource, err)
		}
	}
	asm, err := nodealloc.Assemble(plan.Blocks, plan.Handles)
	if err != nil {
		return res, fmt.Errorf("%w: %w", ErrInvalidSource, err)
	}
	if len(asm.Orphans)+len(asm.Strays) > 0 { // Validate rules them out
		return res, fmt.Errorf("%w: blocks and handles disagree (%v, %v)", ErrInvalidSource, asm.Orphans, asm.Strays)
	}
	for _, r := range asm.Dropped {
		res.Warnings = append(res.Warnings, fmt.Sprintf("block %s of pool %s holds no address and belongs to no node: left unclaimed (free)", r.CIDR, r.Pool))
	}
	st, err := readStoreState(ctx, s, plan, asm)
	if err != nil {
		return res, err
	}
	if len(st.conflicts) > 0 {
		return res, conflictError(st.conflicts)
	}
	status := func(present bool) string { return changeStatus(present, dryRun) }
	for _, p := range plan.Pools {
		res.Changes = append(res.Changes, Change{"pool", p.Name, status(st.poolPresent[p.Name])})
	}
	for _, b := range plan.Blocks {
		ref := store.BlockRef{Pool: b.Pool, CIDR: b.CIDR}
		if !slices.Contains(asm.Dropped, ref) {
			res.Changes = append(res.Changes, Change{"block", ref.String(), status(st.blockPresent[ref])})
		}
	}
	for _, h := range plan.Handles {
		res.Changes = append(res.Changes, Change{"handle", h.ID, status(st.handlePresent[h.ID])})
	}
	if dryRun {
		return res, nil
	}
	if err := writeStore(ctx, s, plan, asm, st); err != nil {
		if errors.Is(err, store.ErrConflict) && !errors.Is(err, ErrConflict) {
			return res, fmt.Errorf("%w: the datastore changed while importing; run the import again (it is idempotent): %w", ErrConflict, err)
		}
		return res, err
	}
	return res, nil
}

// storeState is what the typed store holds of a plan, read before writing.
type storeState struct {
	poolPresent   map[string]bool
	claimPresent  map[store.BlockRef]bool
	blockPresent  map[store.BlockRef]bool
	handlePresent map[string]bool
	conflicts     []string
}

func readStoreState(ctx context.Context, s store.Store, plan *Plan, asm nodealloc.Assembly) (*storeState, error) {
	st := &storeState{claimPresent: map[store.BlockRef]bool{}, blockPresent: map[store.BlockRef]bool{}, handlePresent: map[string]bool{}}
	stored, err := s.ListPools(ctx)
	if err != nil {
		return nil, err
	}
	var specs []ipam.Pool
	for _, p := range stored {
		specs = append(specs, p.Spec)
	}
	st.poolPresent, st.conflicts = comparePools(specs, plan.Pools)
	for _, c := range asm.Claims {
		have, err := s.GetClaim(ctx, c.BlockRef)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return nil, err
		case have.Node != c.Node:
			st.conflicts = append(st.conflicts, fmt.Sprintf("block %s of pool %s is claimed by node %q in ipkeeper, by %q in the import", c.CIDR, c.Pool, have.Node, c.Node))
		default:
			st.claimPresent[c.BlockRef] = true
		}
	}
	objects := map[string]store.Node{}
	get := func(name string) (store.Node, error) {
		if n, ok := objects[name]; ok {
			return n, nil
		}
		n, err := s.GetNode(ctx, name)
		if errors.Is(err, store.ErrNotFound) {
			n, err = store.Node{Name: name}, nil
		}
		if err == nil {
			objects[name] = n
		}
		return n, err
	}
	for _, imp := range asm.Nodes {
		have, err := get(imp.Name)
		if err != nil {
			return nil, err
		}
		merged, steps, conflicts := mergeNode(have, imp)
		st.conflicts = append(st.conflicts, conflicts...)
		for _, b := range imp.Blocks {
			ref := store.BlockRef{Pool: b.Pool, CIDR: b.CIDR}
			_, held := have.Block(ref)
			st.blockPresent[ref] = held && st.claimPresent[ref]
		}
		if len(conflicts) == 0 {
			if err := fitsStore(s.Limits(), have, merged, steps); err != nil {
				return nil, fmt.Errorf("import: %w", err)
			}
		}
	}
	// Handles as stored: the record in the handle's node's object and the
	// records in the lenders its loans name.
	for _, h := range plan.Handles {
		var owners []string // the nodes the import's records of h name
		for _, n := range asm.Nodes {
			if r, ok := n.Handle(h.ID); ok && !slices.Contains(owners, r.Node) {
				owners = append(owners, r.Node)
			}
		}
		present := true
		for _, node := range owners {
			want := importedIPs(asm, node, h.ID)
			have, found, err := storedHandle(get, node, h.ID)
			if err != nil {
				return nil, err
			}
			switch {
			case !found:
				present = false
			case !subsetIPs(have, want):
				present = false
				st.conflicts = append(st.conflicts, fmt.Sprintf("handle %s exists with addresses %s; the import gives it %s", h.ID, ipList(have), ipList(want)))
			case !sameIPs(have, want):
				// Part of it: what an import cut short left (a loan
				// written before its lender's record). The import
				// completes it.
				present = false
			}
		}
		st.handlePresent[h.ID] = present
	}
	return st, nil
}

// subsetIPs reports whether every address of a is in b.
func subsetIPs(a, b []ipam.HandleIP) bool {
	for _, x := range a {
		if !slices.ContainsFunc(b, func(y ipam.HandleIP) bool { return x.Addr == y.Addr && x.Pool == y.Pool }) {
			return false
		}
	}
	return true
}

// importedIPs returns the addresses the import's records of handle id
// naming node hold.
func importedIPs(asm nodealloc.Assembly, node, id string) []ipam.HandleIP {
	var out []ipam.HandleIP
	for _, n := range asm.Nodes {
		if r, ok := n.Handle(id); ok && r.Node == node {
			out = append(out, r.IPs...)
		}
	}
	return out
}

// storedHandle returns the addresses of handle id of node as the store
// holds them, and whether it holds a record or loan of it.
func storedHandle(get func(string) (store.Node, error), node, id string) ([]ipam.HandleIP, bool, error) {
	own, err := get(node)
	if err != nil {
		return nil, false, err
	}
	r, found := own.Handle(id)
	ips := slices.Clone(r.IPs)
	for _, l := range own.LendersOf(id) {
		found = true
		ln, err := get(l)
		if err != nil {
			return nil, false, err
		}
		if lr, ok := ln.Handle(id); ok && lr.Node == node {
			ips = append(ips, lr.IPs...)
		}
	}
	return ips, found, nil
}

// writeStore writes what the store lacks, in the order ApplyStore
// documents.
func writeStore(ctx context.Context, s store.Store, plan *Plan, asm nodealloc.Assembly, st *storeState) error {
	for _, p := range plan.Pools {
		if st.poolPresent[p.Name] {
			continue
		}
		if _, err := s.CreatePool(ctx, store.Pool{Spec: p}); err != nil {
			if !errors.Is(err, store.ErrExists) {
				return fmt.Errorf("write pool %s: %w", p.Name, err)
			}
			have, gerr := s.GetPool(ctx, p.Name)
			if gerr != nil || have.Spec.CIDR != p.CIDR || have.Spec.BlockSize != p.BlockSize {
				return fmt.Errorf("%w: pool %s was created meanwhile as %s /%d (%v)", store.ErrConflict, p.Name, have.Spec.CIDR, have.Spec.BlockSize, gerr)
			}
		}
	}
	for _, n := range asm.Nodes {
		if len(n.Loans) == 0 {
			continue
		}
		if err := mergeInto(ctx, s, store.Node{Name: n.Name, Loans: n.Loans}); err != nil {
			return err
		}
	}
	for _, n := range asm.Nodes {
		for _, c := range asm.Claims {
			if c.Node != n.Name || st.claimPresent[c.BlockRef] {
				continue
			}
			if _, err := s.CreateClaim(ctx, c); err != nil {
				if !errors.Is(err, store.ErrExists) {
					return fmt.Errorf("claim block %s: %w", c.BlockRef, err)
				}
				if have, gerr := s.GetClaim(ctx, c.BlockRef); gerr != nil || have.Node != c.Node {
					return fmt.Errorf("%w: block %s was claimed meanwhile by node %q (%v)", store.ErrConflict, c.BlockRef, have.Node, gerr)
				}
			}
		}
		if err := mergeInto(ctx, s, n); err != nil {
			return err
		}
	}
	return nil
}
