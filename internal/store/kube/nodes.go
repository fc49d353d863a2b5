package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// nodeWire is an IPAMNode's spec: store.NodeSpec (EncodeNode) with its
// handle records as strings (records.go), and the node's name, which the
// object's name may only hash.
type nodeWire struct {
	Node    string            `json:"node"`
	Blocks  []store.BlockSpec `json:"blocks"`
	Records []string          `json:"records"`
	// Handles is read, never written: objects written before records were
	// strings hold them here.
	Handles []store.HandleSpec `json:"handles,omitempty"`
	Loans   []store.LoanSpec   `json:"loans,omitempty"`
}

// wireOf returns the spec to store for node name.
func wireOf(name string, spec store.NodeSpec) nodeWire {
	w := nodeWire{Node: name, Blocks: spec.Blocks, Records: make([]string, len(spec.Handles)), Loans: spec.Loans}
	for i := range spec.Handles {
		w.Records[i] = store.FormatRecord(&spec.Handles[i])
	}
	return w
}

// spec returns the store.NodeSpec w holds.
func (w *nodeWire) spec() (store.NodeSpec, error) {
	spec := store.NodeSpec{Blocks: w.Blocks, Handles: w.Handles, Loans: w.Loans}
	if len(w.Records) > 0 && len(w.Handles) > 0 {
		return store.NodeSpec{}, fmt.Errorf("%w: both records and handles", store.ErrRecord)
	}
	if len(w.Records) > 0 {
		spec.Handles = make([]store.HandleSpec, len(w.Records))
		for i, r := range w.Records {
			h, err := store.ParseRecord(r)
			if err != nil {
				return store.NodeSpec{}, fmt.Errorf("record %d: %w", i, err)
			}
			spec.Handles[i] = h
		}
	}
	return spec, nil
}

// nodeBody validates n (EncodeNode), checks the spec's size and returns
// the object to send, labelled lends.ipkeeper.io/<borrower> for every
// borrower with a record in it — recomputed from the content on every
// write.
func (s *Store) nodeBody(n store.Node) (name string, body []byte, err error) {
	spec, err := store.EncodeNode(n)
	if err != nil {
		return "", nil, err
	}
	raw, err := json.Marshal(wireOf(n.Name, spec))
	if err != nil {
		return "", nil, err
	}
	if err := (store.Limits{MaxObjectBytes: MaxObjectBytes}).Fits("node object "+n.Name, len(raw)); err != nil {
		return "", nil, err
	}
	labels := map[string]string{}
	for _, b := range n.LendsTo() {
		labels[LendsPrefix+labelValue(b)] = ""
	}
	name = s.names.object(n.Name)
	sum := &nodeSummary{Blocks: len(n.Blocks), Handles: len(n.Handles)}
	for _, b := range n.Blocks {
		sum.InUse += len(b.Owners)
	}
	body, err = s.newObjectSummary(kindNode, name, labels, raw, n.Version, sum)
	return name, body, err
}

// decodeNode decodes a node object; with want set it must be that node's,
// else the node its spec names, stored under that node's object name.
func (s *Store) decodeNode(o *object, want string) (store.Node, error) {
	var w nodeWire
	if err := json.Unmarshal(o.Spec, &w); err != nil {
		return store.Node{}, fmt.Errorf("%w: %s: %v", store.ErrCorrupt, what(kindNode, o.Metadata.Name), err)
	}
	if want != "" && w.Node != want {
		return store.Node{}, fmt.Errorf("%w: %s holds node %q, not %q", store.ErrCorrupt, what(kindNode, o.Metadata.Name), w.Node, want)
	}
	if err := store.ValidName("node", w.Node); err != nil {
		return store.Node{}, fmt.Errorf("%w: %s: %w", store.ErrCorrupt, what(kindNode, o.Metadata.Name), err)
	}
	if name := s.names.object(w.Node); name != o.Metadata.Name {
		return store.Node{}, fmt.Errorf("%w: %s holds node %q, whose object name is %q", store.ErrCorrupt, what(kindNode, o.Metadata.Name), w.Node, name)
	}
	spec, err := w.spec()
	if err != nil {
		return store.Node{}, fmt.Errorf("%w: %s: %w", store.ErrCorrupt, what(kindNode, o.Metadata.Name), err)
	}
	n, err := store.DecodeNode(w.Node, spec)
	if err != nil {
		return store.Node{}, fmt.Errorf("%s: %w", what(kindNode, o.Metadata.Name), err)
	}
	n.Version = store.Version(o.Metadata.ResourceVersion)
	return n, nil
}

// GetNode GETs the node's IPAMNode.
func (s *Store) GetNode(ctx context.Context, name string) (store.Node, error) {
	if err := store.ValidName("node", name); err != nil {
		return store.Node{}, err
	}
	o, err := s.get(ctx, kindNode, s.names.object(name))
	if err != nil {
		return store.Node{}, err
	}
	return s.decodeNode(o, name)
}

// CreateNode POSTs a new IPAMNode.
func (s *Store) CreateNode(ctx context.Context, n store.Node) (store.Node, error) {
	n.Version = ""
	name, body, err := s.nodeBody(n)
	if err != nil {
		return store.Node{}, err
	}
	if n.Version, err = s.create(ctx, kindNode, name, body); err != nil {
		return store.Node{}, err
	}
	return n, nil
}

// UpdateNode PUTs the IPAMNode at n.Version.
func (s *Store) UpdateNode(ctx context.Context, n store.Node) (store.Node, error) {
	name, body, err := s.nodeBody(n)
	if err != nil {
		return store.Node{}, err
	}
	if n.Version == "" {
		return store.Node{}, s.noVersion(ctx, kindNode, name)
	}
	if n.Version, err = s.update(ctx, kindNode, name, body); err != nil {
		return store.Node{}, err
	}
	return n, nil
}

// DeleteNode DELETEs the IPAMNode with a resourceVersion precondition.
func (s *Store) DeleteNode(ctx context.Context, n store.Node) error {
	if err := store.ValidName("node", n.Name); err != nil {
		return err
	}
	name := s.names.object(n.Name)
	if n.Version == "" {
		return s.noVersion(ctx, kindNode, name)
	}
	return s.del(ctx, kindNode, name, n.Version)
}

// ListNodes LISTs the partition's IPAMNodes — with LendsTo, those
// labelled lends.ipkeeper.io/<borrower>, kept when a record is the
// borrower's.
func (s *Store) ListNodes(ctx context.Context, sel store.NodeSelector) ([]store.Node, error) {
	var reqs []string
	if sel.LendsTo != "" {
		if err := store.ValidName("node", sel.LendsTo); err != nil {
			return nil, err
		}
		reqs = append(reqs, LendsPrefix+labelValue(sel.LendsTo))
	}
	objs, err := s.list(ctx, kindNode, s.selector(reqs...))
	if err != nil {
		return nil, err
	}
	var out []store.Node
	for i := range objs {
		n, err := s.decodeNode(&objs[i], "")
		if err != nil {
			return nil, err
		}
		if sel.LendsTo != "" && !slices.Contains(n.LendsTo(), sel.LendsTo) {
			continue
		}
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b store.Node) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
