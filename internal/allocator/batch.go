package allocator

import (
	"context"
	"errors"
	"sync"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// Allocations of one node that wait for each other in one process (the
// node agent serving a burst of pods, a benchmark) are committed together:
// the allocation that gets the node's lock takes every allocation queued
// for the node meanwhile and, for those the node's blocks have room for
// (the common case), computes them one after the other on the node's
// object as this process last saw it and writes the object once. An
// object written at its version holds all of them or, failing its
// compare-and-swap, none, and those then run alone, as does every
// allocation that needs more (a block claim, a borrowed or a requested
// address, a handle the object already names). A lone allocation — every
// plugin process's — runs alone.

// pendingAlloc is one queued allocation and, once done, its result.
type pendingAlloc struct {
	ctx  context.Context
	req  Request
	done bool
	h    ipam.Handle
	err  error
}

// allocQueue holds a node's queued allocations.
type allocQueue struct {
	mu      sync.Mutex
	pending []*pendingAlloc
}

func (a *Allocator) queueOf(node string) *allocQueue {
	q, _ := a.queues.LoadOrStore(node, &allocQueue{})
	return q.(*allocQueue)
}

// allocateQueued queues req, waits for the node's lock and returns the
// result: computed by whoever held the lock and took the queue, or by this
// call when it takes the queue itself.
func (a *Allocator) allocateQueued(ctx context.Context, req Request) (ipam.Handle, error) {
	node := req.Handle.Node
	q := a.queueOf(node)
	me := &pendingAlloc{ctx: ctx, req: req}
	q.mu.Lock()
	q.pending = append(q.pending, me)
	q.mu.Unlock()
	defer a.lockNode(node)()
	q.mu.Lock()
	if me.done {
		q.mu.Unlock()
		return me.h, me.err
	}
	batch := q.pending
	q.pending = nil
	q.mu.Unlock()
	alone := batch
	if len(batch) > 1 {
		alone = a.commitTogether(ctx, q, batch)
	}
	for _, p := range alone {
		h, err := a.allocateAlone(p.ctx, p.req)
		q.finish(p, h, err)
	}
	return me.h, me.err
}

// finish records p's result.
func (q *allocQueue) finish(p *pendingAlloc, h ipam.Handle, err error) {
	q.mu.Lock()
	p.h, p.err, p.done = h, err, true
	q.mu.Unlock()
}

// allocateAlone is one allocation's attempts, under the node's lock.
func (a *Allocator) allocateAlone(ctx context.Context, req Request) (ipam.Handle, error) {
	var out ipam.Handle
	err := a.retry(ctx, "allocate "+req.Handle.ID, func() error {
		var err error
		out, err = a.allocateOnce(ctx, req)
		return err
	})
	return out, err
}

// commitTogether computes the allocations of batch that the node's known
// object has room for, in order, and writes the object with them: all in
// one write when they fit the store's limits, else in several
// (takeFitting), each holding whole allocations (ctx is the caller's,
// whose allocation is in batch). It returns the allocations it did not
// commit, to run alone: those that need more than the known object, and
// after a failed write those that write and later ones were to hold.
func (a *Allocator) commitTogether(ctx context.Context, q *allocQueue, batch []*pendingAlloc) []*pendingAlloc {
	node := batch[0].req.Handle.Node
	cur, ok := a.lastKnown(node)
	if !ok {
		return batch
	}
	handles := make([]ipam.Handle, len(batch))
	edits := make([]nodeEdit, len(batch))
	for i, p := range batch {
		edits[i] = func(n store.Node) (store.Node, error) {
			next, h, ok := a.takeFromKnown(p, n)
			if !ok {
				return n, errAlone
			}
			handles[i] = h
			return next, nil
		}
	}
	errs := make([]error, len(batch))
	var alone []*pendingAlloc
	for from := 0; from < len(batch); {
		next, k, changed := a.takeFitting(cur, edits[from:], errs[from:])
		if changed {
			out, err := a.writeNode(ctx, next)
			if err != nil {
				// Nothing of this write was made: each runs alone, reading first.
				return append(alone, batch[from:]...)
			}
			cur = out
		}
		for i := from; i < from+k; i++ {
			if errs[i] != nil {
				alone = append(alone, batch[i])
			} else {
				q.finish(batch[i], handles[i], nil)
			}
		}
		from += k
	}
	return alone
}

// errAlone is takeFromKnown's refusal: the allocation runs alone.
var errAlone = errors.New("allocation needs more than the known node object")

// takeFromKnown computes p's allocation on n from n's own blocks alone,
// as allocateOnce's common case does: the first usable pool of every set
// must have room in n. ok is false for anything else (a handle n names —
// also one an earlier allocation of the batch added —, requested
// addresses, pools that cannot be had from memory, no room), which runs
// alone.
func (a *Allocator) takeFromKnown(p *pendingAlloc, n store.Node) (store.Node, ipam.Handle, bool) {
	req := p.req
	id := req.Handle.ID
	if len(req.Want) > 0 || p.ctx.Err() != nil || hasRecord(n, id) || len(n.LendersOf(id)) > 0 {
		return n, ipam.Handle{}, false
	}
	pools, err := a.requestPools(p.ctx, req)
	if err != nil {
		return n, ipam.Handle{}, false
	}
	al := &allocation{a: a, node: n.Name, own: n, lenders: map[string]store.Node{}, pools: pools}
	h := req.Handle
	h.IPs = nil
	h.Created = a.Now().UTC()
	for _, set := range req.Sets {
		usable, err := usablePools(set, pools, req.Labels)
		if err != nil || len(usable) == 0 {
			return n, ipam.Handle{}, false
		}
		ip, ok, err := al.take(usable[0], h)
		if err != nil || !ok {
			return n, ipam.Handle{}, false
		}
		h.IPs = append(h.IPs, ip)
	}
	al.record(h)
	if !a.knownClaimed(al.own, h) {
		return n, ipam.Handle{}, false // the claim guard needs a read
	}
	return al.own, h, true
}
