package importer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/nodealloc"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// A node object is merged in steps, each leaving a valid object: the
// imported loans; each new block, with every address the import gives it
// still free (appended to the block's free queue); then each imported
// record, taking its addresses in their blocks. One write holds as many
// steps as the store's write limits take (store.Limits.FitsWrite), so a
// node of many handles is written in several writes, each a
// compare-and-swap at the version the previous one returned. A crash
// between two writes leaves a block whose imported addresses are partly
// free and the records of the others: the import run again takes the
// free ones for the handles that have no record yet. When every record
// is written, each block holds the imported free queue again.

// mergeStep is one step of a merge: n with one more part of the import,
// or an error when n cannot take it.
type mergeStep func(n store.Node) (store.Node, error)

// mergeNode returns the steps that add to have what imp holds that have
// lacks — its loans, its blocks (a block have holds must give every
// imported address to the same handle, or leave it free for a handle
// have holds no record of: an import cut short), its records (a record
// have holds must hold the same addresses) — and have with all of them
// made. No steps means have holds all of it.
func mergeNode(have, imp store.Node) (merged store.Node, steps []mergeStep, conflicts []string) {
	var loans []store.Loan
	for _, l := range imp.Loans {
		if !slices.Contains(have.Loans, l) {
			loans = append(loans, l)
		}
	}
	if len(loans) > 0 {
		steps = append(steps, func(n store.Node) (store.Node, error) {
			c := nodealloc.Clone(n)
			c.Loans = append(c.Loans, loans...)
			return c, nil
		})
	}
	for _, b := range imp.Blocks {
		ref := store.BlockRef{Pool: b.Pool, CIDR: b.CIDR}
		hb, ok := have.Block(ref)
		if !ok {
			steps = append(steps, addBlock(b))
			continue
		}
		for _, a := range b.Allocations() {
			got := hb.Owner(a.Addr)
			if got == a.Handle {
				continue
			}
			if _, recorded := have.Handle(a.Handle); got == "" && !recorded {
				continue // left free by an import cut short: its record's step takes it
			}
			conflicts = append(conflicts, fmt.Sprintf("%s is held by %s in ipkeeper, by %s in the import", a.Addr, cmp.Or(got, "nobody"), a.Handle))
		}
	}
	for _, r := range imp.Handles {
		hr, ok := have.Handle(r.ID)
		switch {
		case !ok:
			steps = append(steps, addRecord(r))
		case !sameIPs(hr.IPs, r.IPs):
			conflicts = append(conflicts, fmt.Sprintf("handle %s exists with addresses %s in node object %s; the import gives it %s there", r.ID, ipList(hr.IPs), imp.Name, ipList(r.IPs)))
		}
	}
	merged = nodealloc.Clone(have)
	merged.Name = imp.Name
	if len(conflicts) > 0 || len(steps) == 0 {
		return merged, steps, conflicts
	}
	for _, step := range steps {
		next, err := step(merged)
		if err != nil {
			return merged, steps, append(conflicts, fmt.Sprintf("node object %s cannot take the import: %v", imp.Name, err))
		}
		merged = next
	}
	if err := merged.Validate(); err != nil {
		conflicts = append(conflicts, fmt.Sprintf("node object %s cannot take the import: %v", imp.Name, err))
	}
	return merged, steps, conflicts
}

// addBlock is the step that adds block b with every address it allocates
// free, at the back of its free queue in address order.
func addBlock(b ipam.Block) mergeStep {
	empty := b
	empty.Owners = nil
	empty.Free = append(slices.Clone(b.Free), slices.Sorted(maps.Keys(b.Owners))...)
	return func(n store.Node) (store.Node, error) {
		c := nodealloc.Clone(n)
		c.Blocks = append(c.Blocks, empty)
		return c, nil
	}
}

// addRecord is the step that adds record r and gives it its addresses,
// each free in a block the object holds.
func addRecord(r ipam.Handle) mergeStep {
	r.IPs = slices.Clone(r.IPs)
	return func(n store.Node) (store.Node, error) {
		c := nodealloc.Clone(n)
		for _, ip := range r.IPs {
			i := slices.IndexFunc(c.Blocks, func(b ipam.Block) bool { return b.Pool == ip.Pool && b.CIDR == ip.Block })
			if i < 0 {
				return n, fmt.Errorf("%s of handle %s: the object holds no block %s of pool %s", ip.Addr, r.ID, ip.Block, ip.Pool)
			}
			b := c.Blocks[i]
			ord, err := b.Ordinal(ip.Addr)
			if err != nil {
				return n, err
			}
			if b.Owners[ord] == r.ID {
				continue
			}
			at := slices.Index(b.Free, ord)
			if at < 0 {
				return n, fmt.Errorf("%s of handle %s is held by %s", ip.Addr, r.ID, cmp.Or(b.Owners[ord], "nobody and not free"))
			}
			owners := maps.Clone(b.Owners)
			if owners == nil {
				owners = map[int]string{}
			}
			owners[ord] = r.ID
			b.Owners = owners
			b.Free = slices.Delete(slices.Clone(b.Free), at, at+1)
			c.Blocks[i] = b
		}
		c.Handles = append(c.Handles, r)
		return c, nil
	}
}

// takeSteps makes steps on n in order while what they change together
// fits one write (lim.FitsWrite), and returns n with them made and how
// many it made. The first step is always made, so that a step too large
// on its own is refused by the store (fitsStore finds it first).
func takeSteps(lim store.Limits, n store.Node, steps []mergeStep) (store.Node, int, error) {
	cur := n
	for i, step := range steps {
		next, err := step(cur)
		if err != nil {
			return n, 0, err
		}
		if i > 0 && errors.Is(lim.FitsWrite(next), store.ErrTooLarge) {
			return cur, i, nil
		}
		cur = next
	}
	return cur, len(steps), nil
}

// fitsStore returns an error wrapping store.ErrTooLarge when the merge of
// have into merged cannot be stored: the object is over the size of a
// backend that stores a node as one object, or one of steps alone does
// not fit one write.
func fitsStore(lim store.Limits, have, merged store.Node, steps []mergeStep) error {
	if lim.MaxNodeBytes > 0 {
		data, err := store.MarshalNode(merged)
		if err != nil {
			return err
		}
		if len(data) > lim.MaxNodeBytes {
			return fmt.Errorf("%w: node object %q encodes to %d bytes, the limit is %d", store.ErrTooLarge, merged.Name, len(data), lim.MaxNodeBytes)
		}
	}
	cur := have
	for len(steps) > 0 {
		next, k, err := takeSteps(lim, cur, steps)
		if err != nil {
			return err
		}
		if err := lim.FitsWrite(next); err != nil {
			return err
		}
		cur = store.AsStored(next, store.Parts{Head: "planned"})
		steps = steps[k:]
	}
	return nil
}

// mergeInto merges imp into the stored object of its name in writes
// within the store's limits (takeSteps), each a compare-and-swap at the
// version the previous one returned; an object changed meanwhile is read
// and merged again.
func mergeInto(ctx context.Context, s store.Store, imp store.Node) error {
	lim := s.Limits()
	read := func() (store.Node, error) {
		have, err := s.GetNode(ctx, imp.Name)
		if errors.Is(err, store.ErrNotFound) {
			return store.Node{Name: imp.Name}, nil
		}
		return have, err
	}
	have, err := read()
	for conflicts := 0; ; {
		if err != nil {
			return err
		}
		_, steps, problems := mergeNode(have, imp)
		if len(problems) > 0 {
			return fmt.Errorf("%w: the datastore changed while importing: %w", ErrConflict, conflictError(problems))
		}
		if len(steps) == 0 {
			return nil
		}
		next, _, serr := takeSteps(lim, have, steps)
		if serr != nil {
			return fmt.Errorf("%w: the datastore changed while importing: node object %s: %w", ErrConflict, imp.Name, serr)
		}
		var written store.Node
		if have.Version == "" {
			written, err = s.CreateNode(ctx, next)
		} else {
			written, err = s.UpdateNode(ctx, next)
		}
		if errors.Is(err, store.ErrExists) || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
			if conflicts++; conflicts >= storeAttempts {
				return fmt.Errorf("%w: node object %s kept changing during the import", store.ErrConflict, imp.Name)
			}
			have, err = read() // written meanwhile: merge again
			continue
		}
		if err != nil {
			return fmt.Errorf("write node object %s: %w", imp.Name, err)
		}
		have = written
	}
}
