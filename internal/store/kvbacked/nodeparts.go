package kvbacked

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// A node object is kept in parts under nodes/<node>/ (see the package
// doc): its head, one key per block and one per handle record, so that a
// write puts what changed.
const (
	headPart   = "head"
	blockPart  = "block/"
	recordPart = "record/"
)

func nodePartsPrefix(node string) string { return nodePrefix + node + "/" }
func headKey(node string) string         { return nodePartsPrefix(node) + headPart }
func blockPartKey(node string, r store.BlockRef) string {
	return nodePartsPrefix(node) + blockPart + r.Pool + "/" + blockName(r.CIDR)
}
func recordKey(node, id string) string { return nodePartsPrefix(node) + recordPart + id }

// headSpec is a node's head: its loans.
type headSpec struct {
	Loans []store.LoanSpec `json:"loans,omitempty"`
}

func loanSpecs(ls []store.Loan) []store.LoanSpec {
	var out []store.LoanSpec
	for _, l := range ls {
		out = append(out, store.LoanSpec(l))
	}
	return out
}

// decodeParts rebuilds node object name from its parts es (sorted by
// key, all under its prefix): store.ErrNotFound without a head.
func decodeParts(name string, es []kv.KeyValue) (store.Node, error) {
	corrupt := func(key string, err error) error {
		return fmt.Errorf("%w: node object %q: %s: %v", store.ErrCorrupt, name, key, err)
	}
	prefix := nodePartsPrefix(name)
	// Records are most of the parts.
	spec := store.NodeSpec{Handles: make([]store.HandleSpec, 0, len(es))}
	parts := store.Parts{Blocks: map[store.BlockRef]store.Version{}, Records: make(map[string]store.Version, len(es))}
	var head int64
	for _, e := range es {
		part := strings.TrimPrefix(e.Key, prefix)
		switch {
		case part == headPart:
			var h headSpec
			if err := json.Unmarshal(e.Value, &h); err != nil {
				return store.Node{}, corrupt(e.Key, err)
			}
			spec.Loans, head = h.Loans, e.Version
		case strings.HasPrefix(part, blockPart):
			var b store.BlockSpec
			if err := json.Unmarshal(e.Value, &b); err != nil {
				return store.Node{}, corrupt(e.Key, err)
			}
			ref := store.BlockRef{Pool: b.Pool, CIDR: b.CIDR}
			if !b.CIDR.IsValid() || blockPartKey(name, ref) != e.Key {
				return store.Node{}, corrupt(e.Key, fmt.Errorf("block %s of pool %q stored under another key", b.CIDR, b.Pool))
			}
			spec.Blocks = append(spec.Blocks, b)
			parts.Blocks[ref] = version(e.Version)
		case strings.HasPrefix(part, recordPart):
			h, err := store.ParseRecord(string(e.Value))
			if err != nil {
				return store.Node{}, corrupt(e.Key, err)
			}
			if !strings.HasPrefix(e.Key, prefix) || part[len(recordPart):] != h.ID {
				return store.Node{}, corrupt(e.Key, fmt.Errorf("record of handle %q stored under another key", h.ID))
			}
			spec.Handles = append(spec.Handles, h)
			parts.Records[h.ID] = version(e.Version)
		default:
			return store.Node{}, corrupt(e.Key, fmt.Errorf("not a part of a node object"))
		}
	}
	if head == 0 {
		if len(es) > 0 {
			return store.Node{}, corrupt(prefix+headPart, fmt.Errorf("parts without a head"))
		}
		return store.Node{}, store.ErrNotFound
	}
	n, err := store.DecodeNode(name, spec)
	if err != nil {
		return store.Node{}, err
	}
	parts.Head = version(head)
	return store.AsStoredAt(n, parts, version(head)), nil
}

// hintedNode is node object name as a hint holds it: its encoding
// (store.MarshalNode) as stored at head version v. Every write of a node
// compares its head alone, so a node known at its head's version is
// known whole.
func hintedNode(name string, val []byte, v store.Version) (store.Node, error) {
	n, err := store.UnmarshalNode(name, val)
	if err != nil {
		return store.Node{}, err
	}
	return store.AsStoredAt(n, store.Parts{Head: v}, v), nil
}

// NodeBlockKey and NodeRecordKey are the keys of a block's and a handle
// record's part of node's object (NodeHeadKey is its head's), for tests
// that write parts no store.Store write makes (kvbackedtest).
func NodeBlockKey(node string, ref store.BlockRef) string { return blockPartKey(node, ref) }
func NodeRecordKey(node, id string) string                { return recordKey(node, id) }
