package kube

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// blockWire is an IPAMBlock's spec: the claim (store.ClaimSpec's fields)
// and, once its node uses the block, the block's state.
type blockWire struct {
	Pool  string       `json:"pool"`
	CIDR  netip.Prefix `json:"cidr"`
	Node  string       `json:"node"`
	State *blockState  `json:"state,omitempty"`
}

// blockState is a block's part of its node object: the free queue
// (store.FormatQueue) and the records of the handles with addresses in
// the block, each listing only those addresses (store.FormatRecord),
// keyed by the record's first field (the handle ID as a record writes
// it) and holding the rest, so that a write adds, replaces or removes one
// record by its key (a JSON Patch) without knowing the others.
type blockState struct {
	Free    string            `json:"free"`
	Records map[string]string `json:"records"`
}

// splitRecord splits a record (store.FormatRecord) into its key (the
// handle ID as written) and the rest.
func splitRecord(r string) (key, rest string) {
	key, rest, _ = strings.Cut(r, " ")
	return key, rest
}

// recordKey is the key of handle id's record in a block's state.
func recordKey(id string) string {
	key, _ := splitRecord(store.FormatRecord(&store.HandleSpec{ID: id}))
	return key
}

// records returns the state's records, by key.
func (st *blockState) records() []string {
	out := make([]string, 0, len(st.Records))
	for _, k := range slices.Sorted(maps.Keys(st.Records)) {
		out = append(out, k+" "+st.Records[k])
	}
	return out
}

// blockSummary counts a block's state for `kubectl get`: recomputed on
// every write of the state, never read.
type blockSummary struct {
	InUse   int `json:"inUse"`
	Handles int `json:"handles"`
	// converted: the state is written by a conversion
	// (AnnotationConverted).
	converted bool
}

// storedBlock is an IPAMBlock as read: the claim, its state and its
// resourceVersion.
type storedBlock struct {
	claim   store.Claim
	state   *blockState
	version store.Version
}

// decodeBlock decodes an IPAMBlock; with want set it must be that block,
// else the block its spec names, stored under that block's object name.
func (s *Store) decodeBlock(o *object, want *store.BlockRef) (storedBlock, error) {
	var w blockWire
	if err := json.Unmarshal(o.Spec, &w); err != nil {
		return storedBlock{}, fmt.Errorf("%w: %s: %v", store.ErrCorrupt, what(kindBlock, o.Metadata.Name), err)
	}
	ref := store.BlockRef{Pool: w.Pool, CIDR: w.CIDR}
	if want != nil {
		ref = *want
	}
	c, err := store.DecodeClaim(ref, store.ClaimSpec{Pool: w.Pool, CIDR: w.CIDR, Node: w.Node})
	if err != nil {
		return storedBlock{}, fmt.Errorf("%s: %w", what(kindBlock, o.Metadata.Name), err)
	}
	if name := s.names.claim(c.Pool, c.CIDR); name != o.Metadata.Name {
		return storedBlock{}, fmt.Errorf("%w: %s holds the claim of %s, whose object name is %q", store.ErrCorrupt, what(kindBlock, o.Metadata.Name), c.BlockRef, name)
	}
	c.Version = store.Version(o.Metadata.ResourceVersion)
	return storedBlock{claim: c, state: w.State, version: c.Version}, nil
}

// compareFamily orders block refs IPv4 first, then by pool and CIDR: the
// order in which a node object's blocks are read and written.
func compareFamily(a, b store.BlockRef) int {
	return cmp.Or(cmp.Compare(a.CIDR.Addr().BitLen(), b.CIDR.Addr().BitLen()), a.Compare(b))
}

// fragments returns, for each block of refs, the records of n's handles
// restricted to their addresses in that block, in n's order.
func fragments(n store.Node, refs []store.BlockRef) map[store.BlockRef][]ipam.Handle {
	out := make(map[store.BlockRef][]ipam.Handle, len(refs))
	for _, ref := range refs {
		out[ref] = nil
	}
	for _, h := range n.Handles {
		for i, ip := range h.IPs {
			ref := store.BlockRef{Pool: ip.Pool, CIDR: ip.Block}
			frags, ok := out[ref]
			if !ok {
				continue
			}
			if slices.ContainsFunc(h.IPs[:i], func(o ipam.HandleIP) bool { return o.Pool == ip.Pool && o.Block == ip.Block }) {
				continue // this block's fragment is made already
			}
			f := h
			f.IPs = nil
			for _, o := range h.IPs[i:] {
				if o.Pool == ip.Pool && o.Block == ip.Block {
					f.IPs = append(f.IPs, o)
				}
			}
			out[ref] = append(frags, f)
		}
	}
	return out
}

// blockContent is what a write of block ref of node object n sends: the
// spec, the labels and the summary. The spec is checked against
// MaxObjectBytes: nothing is sent when it is over.
type blockContent struct {
	ref    store.BlockRef
	name   string
	spec   []byte
	labels map[string]string
	sum    *blockSummary
	// state is the spec's state; byID the key of each handle's record in
	// it; frags the records' handles; node the node object's name.
	state *blockState
	byID  map[string]string
	frags []ipam.Handle
	node  string
}

// blockContent returns block ref of n (which holds it) as stored, its
// records being frags.
func (s *Store) blockContent(n store.Node, ref store.BlockRef, frags []ipam.Handle) (blockContent, error) {
	b, ok := n.Block(ref)
	if !ok {
		return blockContent{}, fmt.Errorf("%w: node object %q does not hold block %s", store.ErrInvalid, n.Name, ref)
	}
	st := &blockState{Free: store.FormatQueue(b.Free), Records: make(map[string]string, len(frags))}
	labels := map[string]string{LabelNode: labelValue(n.Name), LabelPool: labelValue(ref.Pool)}
	byID := make(map[string]string, len(frags))
	for i := range frags {
		hs := store.EncodeHandle(frags[i], n.Name)
		key, rest := splitRecord(store.FormatRecord(&hs))
		st.Records[key] = rest
		byID[frags[i].ID] = key
		if frags[i].Node != n.Name {
			labels[LendsPrefix+labelValue(frags[i].Node)] = ""
		}
		if frags[i].Sticky != "" {
			labels[StickyPrefix+labelValue(frags[i].Sticky)] = ""
		}
	}
	spec, err := json.Marshal(blockWire{Pool: ref.Pool, CIDR: ref.CIDR, Node: n.Name, State: st})
	if err != nil {
		return blockContent{}, fmt.Errorf("%w: block %s: %v", store.ErrInvalid, ref, err)
	}
	if err := (store.Limits{MaxObjectBytes: MaxObjectBytes}).Fits("block "+ref.String()+" of node object "+n.Name, len(spec)); err != nil {
		return blockContent{}, err
	}
	return blockContent{ref: ref, name: s.names.claim(ref.Pool, ref.CIDR), spec: spec, labels: labels,
		sum: &blockSummary{InUse: len(b.Owners), Handles: len(frags)}, state: st, byID: byID, frags: frags, node: n.Name}, nil
}

// patchOps returns the JSON Patch operations that turn the block's state
// as stored at the version the change was computed against into c's:
// the records of the handles in ids (those new, changed or dropped)
// added or replaced, or removed where they hold no address of the block;
// the free queue and the summary replaced; the labels replaced when a
// record that may name a borrower or a sticky identity is added or
// removed, or the block holds a sticky record. The state as
// stored is not needed: a removal adds the key first (a JSON Patch
// removes only a member that exists), so it holds whether or not the
// block held a record of that handle.
func (c *blockContent) patchOps(ids []string, partition string) []patchOp {
	const records = "/spec/state/records/"
	ops := []patchOp{
		{Op: "add", Path: "/spec/state/free", Value: c.state.Free},
		{Op: "add", Path: "/summary", Value: c.sum},
	}
	labels := false
	for _, id := range ids {
		key, ok := c.byID[id]
		if !ok {
			path := records + pointerEscape.Replace(recordKey(id))
			ops = append(ops, patchOp{Op: "add", Path: path, Value: "-"}, patchOp{Op: "remove", Path: path})
			labels = true
			continue
		}
		ops = append(ops, patchOp{Op: "add", Path: records + pointerEscape.Replace(key), Value: c.state.Records[key]})
	}
	for i := range c.frags {
		if (c.frags[i].Node != c.node || c.frags[i].Sticky != "") && slices.Contains(ids, c.frags[i].ID) {
			labels = true
		}
	}
	for k := range c.labels {
		if strings.HasPrefix(k, StickyPrefix) {
			labels = true // a record changed may have dropped its identity
		}
	}
	if labels {
		l := maps.Clone(c.labels)
		if partition != "" {
			l[LabelPartition] = partition
		}
		ops = append(ops, patchOp{Op: "add", Path: "/metadata/labels", Value: l})
	}
	return ops
}

// body returns the object to PUT at version v.
func (s *Store) blockBody(c blockContent, v store.Version) ([]byte, error) {
	labels := make(map[string]string, len(c.labels)+1)
	for k, val := range c.labels {
		labels[k] = val
	}
	return s.newObjectSummary(kindBlock, c.name, labels, c.spec, v, c.sum)
}

// assemble rebuilds node object name from its head's loans and the state
// of its blocks: each block's records are fragments of handles, merged by
// ID (a dual-stack handle has one in each family's block), their
// addresses in the order of the blocks (IPv4 first). A record listing an
// address outside the block holding it is ErrCorrupt.
func assemble(name string, loans []store.LoanSpec, head store.Version, blocks []storedBlock) (store.Node, error) {
	slices.SortFunc(blocks, func(a, b storedBlock) int { return compareFamily(a.claim.BlockRef, b.claim.BlockRef) })
	spec := store.NodeSpec{Loans: loans, Blocks: make([]store.BlockSpec, 0, len(blocks))}
	parts := store.Parts{Head: head, Blocks: make(map[store.BlockRef]store.Version, len(blocks))}
	at := map[string]int{}
	for _, b := range blocks {
		ref := b.claim.BlockRef
		spec.Blocks = append(spec.Blocks, store.BlockSpec{Pool: ref.Pool, CIDR: ref.CIDR, Free: b.state.Free})
		parts.Blocks[ref] = b.version
		for _, r := range b.state.records() {
			hs, err := store.ParseRecord(r)
			if err != nil {
				return store.Node{}, fmt.Errorf("%w: node object %q: block %s: %w", store.ErrCorrupt, name, ref, err)
			}
			for _, a := range hs.IPs {
				if a.Pool != ref.Pool || !ref.CIDR.Contains(a.Addr) {
					return store.Node{}, fmt.Errorf("%w: node object %q: block %s holds a record of handle %q listing %s of pool %q, outside the block",
						store.ErrCorrupt, name, ref, hs.ID, a.Addr, a.Pool)
				}
			}
			if i, ok := at[hs.ID]; ok {
				spec.Handles[i].IPs = append(spec.Handles[i].IPs, hs.IPs...)
				continue
			}
			at[hs.ID] = len(spec.Handles)
			spec.Handles = append(spec.Handles, hs)
		}
	}
	n, err := store.DecodeNode(name, spec)
	if err != nil {
		return store.Node{}, err
	}
	return store.AsStored(n, parts), nil
}
