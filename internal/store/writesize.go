package store

import "fmt"

// partKeyBytes is what WriteSize counts for the name of one part (its key
// on the kv backends: the node's name and the part's, and a prefix),
// beyond the names it is made of.
const partKeyBytes = 64

// writeReserve is what FitsWrite leaves of Limits.MaxWriteBytes for what
// a backend adds to a write that WriteSize does not count: the conditions
// that compare the node's head, the guards of a remembered state.
const writeReserve = 16 << 10

// WriteSize returns what one write of n puts or deletes against the state
// n was read with (Changes): the parts, as Limits.MaxWriteParts counts
// them (the head, each block and record changed or gone, an index entry
// for each other node a changed record belongs to and for each sticky
// identity of a changed record), and an estimate of
// their bytes (names and encodings) that is not below what a backend
// sends. It returns Changes' error when the write is invalid.
func WriteSize(n Node) (parts, bytes int, err error) {
	c, err := Changes(n)
	if err != nil {
		return 0, 0, err
	}
	name := len(n.Name)
	parts, bytes = 1, partKeyBytes+name
	for _, l := range n.Loans {
		bytes += len(l.Handle) + len(l.Lender) + 32
	}
	for _, ref := range c.Removed {
		parts++
		bytes += partKeyBytes + name + len(ref.Pool) + 48
	}
	for _, ref := range c.Blocks {
		parts++
		bytes += 2*partKeyBytes + name + 2*len(ref.Pool) + 96
		if b, ok := n.Block(ref); ok {
			bytes += len(FormatQueue(b.Free))
		}
	}
	for _, id := range c.Dropped {
		parts++
		bytes += partKeyBytes + name + len(id)
	}
	borrowers, sticky := map[string]bool{}, map[string]bool{}
	for _, id := range c.Records {
		h, _ := n.Handle(id)
		spec := EncodeHandle(h, n.Name)
		parts++
		bytes += partKeyBytes + name + len(id) + len(FormatRecord(&spec))
		if h.Node != n.Name && !borrowers[h.Node] {
			borrowers[h.Node] = true
			parts++
			bytes += partKeyBytes + name + len(h.Node)
		}
		if h.Sticky != "" && !sticky[h.Sticky] {
			sticky[h.Sticky] = true
			parts++
			bytes += partKeyBytes + name + len(h.Sticky)
		}
	}
	return parts, bytes, nil
}

// FitsWrite returns nil when one write of n (WriteSize) fits l, an error
// wrapping ErrTooLarge when it does not, and Changes' error when the
// write is invalid. A caller with a large change of one node object (many
// handles released, an import) writes it in parts that fit.
func (l Limits) FitsWrite(n Node) error {
	if l.MaxWriteParts <= 0 && l.MaxWriteBytes <= 0 {
		return nil
	}
	parts, bytes, err := WriteSize(n)
	switch {
	case err != nil:
		return err
	case l.MaxWriteParts > 0 && parts > l.MaxWriteParts:
		return fmt.Errorf("%w: a write of node object %q changes %d parts, the limit is %d", ErrTooLarge, n.Name, parts, l.MaxWriteParts)
	case l.MaxWriteBytes > 0 && bytes > max(l.MaxWriteBytes-writeReserve, l.MaxWriteBytes/2):
		return fmt.Errorf("%w: a write of node object %q carries about %d bytes, the limit is %d", ErrTooLarge, n.Name, bytes, l.MaxWriteBytes)
	}
	return nil
}
