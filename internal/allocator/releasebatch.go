package allocator

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// ReleaseOutcome is what ReleaseObservedAll did to one observed handle:
// the addresses it freed, or why it freed nothing.
type ReleaseOutcome struct {
	Freed []netip.Addr
	Err   error
}

// ReleaseObservedAll releases the observed handles as ReleaseObserved
// does — each guarded by its records as observed, a changed one failing
// with ErrHandleChanged and left untouched — but the handles whose
// addresses all sit in their own node's object are released together:
// as many of them in one write of that object as the store's limits
// allow, whole handles in each write. The first write is tried on the
// object as this allocator last saw it (the read Observe made), so a
// node's leaks usually cost one request per write; a conflict rereads.
// Handles with borrowed parts or no records are released one by one.
// The outcomes are in the order of obs.
func (a *Allocator) ReleaseObservedAll(ctx context.Context, obs []Observed) []ReleaseOutcome {
	out := make([]ReleaseOutcome, len(obs))
	byNode := map[string][]int{}
	var nodes []string
	for i, o := range obs {
		if len(o.Parts) != 1 || o.Parts[0].Object != o.Handle.Node {
			out[i].Freed, out[i].Err = a.ReleaseObserved(ctx, o)
			continue
		}
		node := o.Handle.Node
		if _, seen := byNode[node]; !seen {
			nodes = append(nodes, node)
		}
		byNode[node] = append(byNode[node], i)
	}
	for _, node := range nodes {
		idx := byNode[node]
		recs := make([]ipam.Handle, len(idx))
		for j, i := range idx {
			recs[j] = obs[i].Parts[0].Record
		}
		res := a.releaseRecords(ctx, node, recs)
		for j, i := range idx {
			out[i] = res[j]
		}
	}
	return out
}

// releaseRecords releases records of node's own object, each only while
// it is as observed, in as few writes as the store's limits allow
// (writeEdits): each write releases whole handles. An error means the
// handles it was returned for were not released.
func (a *Allocator) releaseRecords(ctx context.Context, node string, recs []ipam.Handle) []ReleaseOutcome {
	res := make([]ReleaseOutcome, len(recs))
	edits := make([]nodeEdit, len(recs))
	for j, rec := range recs {
		edits[j] = func(n store.Node) (store.Node, error) {
			next, ips, err := releaseObservedRecord(n, rec, true)
			if err == nil {
				res[j].Freed = addrs(ips)
			}
			return next, err
		}
	}
	errs, _ := a.writeEdits(ctx, fmt.Sprintf("release %d handles of node %s", len(recs), node), node, edits)
	for j, err := range errs {
		if err != nil {
			res[j] = ReleaseOutcome{Err: err}
		}
	}
	return res
}
