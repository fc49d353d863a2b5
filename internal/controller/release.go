package controller

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/leaks"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// ReleaseWorkers bounds the nodes whose leaks are being released at once.
// The leaks of one node are released together, in one write of its object
// (allocator.ReleaseObservedAll; a leak with borrowed parts takes its own
// writes). etcd commits concurrent transactions together (one fsync for
// many), so more workers release faster (make bench-controller built with
// 8 and with 32; docs/BENCHMARKS.md, "Controller, address map, pod-aware
// ADD").
const ReleaseWorkers = 32

// releaseTimeout bounds the release of one node's leaks. A release under
// way is not cut short when the term ends: ended halfway, whether it
// committed would be unknown and it might go unlogged.
const releaseTimeout = 30 * time.Second

// releaseConfirmed releases the confirmed leaks, a node's together. Before
// each node's release it checks that the term goes on (ctx) and that the
// process was not paused (it may have lost its Lease without knowing
// yet); when either fails no further release starts, and the caller sees
// why.
func (c *Controller) releaseConfirmed(ctx context.Context, a *allocator.Allocator, confirmed []string,
	byKey map[string]allocator.Observed, leakOf map[string]leaks.Leak) {
	groups := map[string][]string{}
	var order []string
	for _, k := range confirmed {
		g := byKey[k].Handle.Node
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], k)
	}
	seen := c.stallsSeen
	var stop atomic.Bool
	work := make(chan []string)
	var wg sync.WaitGroup
	for range min(c.releaseWorkers, len(order)) {
		wg.Go(func() {
			for keys := range work {
				if stop.Load() || ctx.Err() != nil || c.guard.count() != seen {
					stop.Store(true)
					continue
				}
				obs := make([]allocator.Observed, len(keys))
				for i, k := range keys {
					obs[i] = byKey[k]
				}
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
				for i, r := range a.ReleaseObservedAll(rctx, obs) {
					c.report(obs[i], leakOf[keys[i]], r)
				}
				cancel()
			}
		})
	}
	for _, g := range order {
		work <- groups[g]
	}
	close(work)
	wg.Wait()
}

// report logs and counts the release of one confirmed leak.
func (c *Controller) report(o allocator.Observed, l leaks.Leak, r allocator.ReleaseOutcome) {
	h := o.Handle
	attrs := []any{"pod", podName(h), "uid", h.PodUID, "address", addrList(h), "node", l.Node,
		"reason", string(l.Reason), "handle", h.ID, "detail", l.Detail}
	switch {
	case errors.Is(r.Err, allocator.ErrHandleChanged):
		c.m.releaseSkips.WithLabelValues("changed").Inc()
		c.log.Info("leak not released: the allocation changed since it was observed", append(attrs, "err", r.Err)...)
	case r.Err != nil:
		c.m.releaseSkips.WithLabelValues("error").Inc()
		c.log.Error("releasing a leaked allocation failed", append(attrs, "err", r.Err)...)
	default:
		c.m.releases.WithLabelValues(string(l.Reason)).Inc()
		attrs[5] = joinAddrs(r.Freed)
		c.log.Info("released leaked address", attrs...)
	}
}

// freeNode frees the empty blocks of a node confirmed gone: out of its
// object, then their claims.
func (c *Controller) freeNode(ctx context.Context, a *allocator.Allocator, node string) {
	res, err := a.FreeNodeBlocks(ctx, node)
	for _, b := range res.Freed {
		c.m.blocksFreed.Inc()
		c.log.Info("freed empty block of deleted node", "node", node, "pool", b.Pool, "block", b.Block.String(), "reason", string(leaks.NodeGone))
	}
	for _, b := range res.Dropped {
		c.log.Info("dropped claim of deleted node whose block its object did not hold", "node", node, "pool", b.Pool, "block", b.Block.String())
	}
	if len(res.Kept) > 0 {
		level := slog.LevelInfo
		if node == store.UnaffineNode {
			// Imported blocks of no node: kept for as long as their
			// pods live, and looked at on every pass.
			level = slog.LevelDebug
		}
		c.log.Log(ctx, level, "blocks of deleted node kept until their addresses are released", "node", node, "blocks", len(res.Kept))
	}
	if err != nil {
		c.log.Error("freeing the blocks of a deleted node failed", "node", node, "err", err)
	}
}

// orphanKeys are the tracker keys of the orphan claims of nodes not in
// gone (a gone node's orphan claims are deleted with its blocks).
func orphanKeys(orphans map[string][]store.BlockRef, gone []string) []string {
	var keys []string
	for node, refs := range orphans {
		if _, isGone := slices.BinarySearch(gone, node); isGone {
			continue
		}
		for _, r := range refs {
			keys = append(keys, node+"\x00"+r.Pool+"\x00"+r.CIDR.String())
		}
	}
	slices.Sort(keys)
	return keys
}

// adoptOrphans takes into their nodes' objects the blocks of the orphan
// claims confirmed (keys of orphanKeys), one AdoptClaims per node.
func (c *Controller) adoptOrphans(ctx context.Context, a *allocator.Allocator, confirmed []string) {
	var nodes []string
	for _, k := range confirmed {
		node, _, _ := strings.Cut(k, "\x00")
		if len(nodes) == 0 || nodes[len(nodes)-1] != node {
			nodes = append(nodes, node)
		}
	}
	for _, node := range nodes {
		if ctx.Err() != nil {
			return
		}
		refs, err := a.AdoptClaims(ctx, node)
		if err != nil {
			c.log.Error("adopting the orphan claims of a node failed", "node", node, "err", err)
			continue
		}
		for _, r := range refs {
			c.m.claimsAdopted.Inc()
			c.log.Info("adopted orphan claim: its block joined its node's object, empty", "node", node, "pool", r.Pool, "block", r.CIDR.String())
		}
	}
}
