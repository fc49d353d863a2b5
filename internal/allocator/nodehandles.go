package allocator

import (
	"context"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// NodeHandles lists the handles of one node from one read of its object:
// its own records (with their addresses in its blocks) and the handles
// its loans name (whose addresses are in lenders' blocks, not read here;
// a handle only loans name carries the network, container and interface
// its ID spells). Sorted by ID. This is what a node's CNI GC needs to
// decide, without reading the rest of the cluster.
func (a *Allocator) NodeHandles(ctx context.Context, node string) ([]ipam.Handle, error) {
	own, err := a.readNode(ctx, node)
	if err != nil {
		return nil, err
	}
	byID := map[string]ipam.Handle{}
	for _, r := range own.Handles {
		if r.Node == node {
			byID[r.ID] = r
		}
	}
	for _, l := range own.Loans {
		if _, ok := byID[l.Handle]; ok {
			continue
		}
		h := ipam.Handle{ID: l.Handle, Node: node}
		h.Network, h.ContainerID, h.IfName, _ = ipam.ParseHandleID(l.Handle)
		byID[l.Handle] = h
	}
	out := make([]ipam.Handle, 0, len(byID))
	for _, h := range byID {
		out = append(out, h)
	}
	slices.SortFunc(out, func(x, y ipam.Handle) int { return strings.Compare(x.ID, y.ID) })
	return out, nil
}
