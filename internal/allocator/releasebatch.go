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
// addresses all sit in their own node's object are released together,
// one write of that object for all of them. The write is tried first on
// the object as this allocator last saw it (the read Observe made),
// so a node's leaks usually cost one request in all; a conflict rereads.
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
		res, err := a.releaseRecords(ctx, node, recs)
		for j, i := range idx {
			if err != nil {
				out[i].Err = err
				continue
			}
			out[i] = res[j]
		}
	}
	return out
}

// releaseRecords releases records of node's own object in one write,
// each only while it is as observed. An error means nothing was written.
func (a *Allocator) releaseRecords(ctx context.Context, node string, recs []ipam.Handle) ([]ReleaseOutcome, error) {
	var res []ReleaseOutcome
	err := a.retry(ctx, fmt.Sprintf("release %d handles of node %s", len(recs), node), func() error {
		n, known := a.lastKnown(node)
		if !known {
			var err error
			if n, err = a.readNode(ctx, node); err != nil {
				return err
			}
		}
		var next store.Node
		var changed bool
		res, next, changed = releaseEach(n, recs)
		if !changed && known {
			// Judged on a remembered object: judge again on a read.
			var err error
			if n, err = a.readNode(ctx, node); err != nil {
				return err
			}
			res, next, changed = releaseEach(n, recs)
		}
		if !changed {
			return nil
		}
		_, err := a.writeNode(ctx, next)
		return err
	})
	return res, err
}

// releaseEach releases from n each record that is as observed, and says
// why the others were not.
func releaseEach(n store.Node, recs []ipam.Handle) (res []ReleaseOutcome, next store.Node, changed bool) {
	res = make([]ReleaseOutcome, len(recs))
	next = n
	for j, rec := range recs {
		c, ips, err := releaseObservedRecord(next, rec, true)
		if err != nil {
			res[j].Err = err
			continue
		}
		next, changed = c, true
		res[j].Freed = addrs(ips)
	}
	return res, next, changed
}
