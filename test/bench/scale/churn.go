package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
)

// churn replaces pods at a steady rate, as pods come and go on a busy
// cluster: a change is a pod deleted and its allocation released (what
// the runtime's DEL does), or a pod created on the same node and an
// address of each family allocated for it (its ADD), through the
// allocator. Frozen nodes are left alone.
type churn struct {
	c    *cluster
	rate float64 // changes per second

	done, failed, behind atomic.Int64
	firstErr             atomic.Value
}

// run makes changes until ctx ends, at most 32 in flight (a tick that
// finds them all busy, or no unfrozen node, is counted behind and
// skipped).
func (ch *churn) run(ctx context.Context) {
	if ch.rate <= 0 {
		return
	}
	rng := rand.New(rand.NewPCG(7, 11))
	// A tick replaces a pod: two changes.
	tick := time.NewTicker(time.Duration(2 * float64(time.Second) / ch.rate))
	defer tick.Stop()
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var node string
		var p pod
		ok := false
		for range 20 { // a frozen node is skipped
			node = ch.c.nodes[rng.IntN(len(ch.c.nodes))]
			if p, ok = ch.c.takePod(node, rng); ok {
				break
			}
		}
		if !ok {
			ch.behind.Add(1)
			continue
		}
		select {
		case sem <- struct{}{}:
		default:
			ch.c.addPod(node, p)
			ch.behind.Add(1)
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			ch.replace(ctx, node, p)
		})
	}
}

// replace deletes p (then releases its allocation) and creates a pod in
// its place (then allocates for it): two changes.
func (ch *churn) replace(ctx context.Context, node string, p pod) {
	ctx = context.WithoutCancel(ctx)
	if err := ch.c.deletePod(ctx, p.name); err != nil {
		ch.fail(fmt.Errorf("delete pod %s: %w", p.name, err))
		return
	}
	if _, err := ch.c.alloc.Release(ctx, node, p.handle); err != nil {
		ch.fail(fmt.Errorf("release %s: %w", p.handle, err))
		return
	}
	ch.done.Add(1)
	np, err := ch.c.createPod(ctx, node, fmt.Sprintf("q-%s-%d", node[len("node-"):], ch.c.seq.Add(1)))
	if err != nil {
		ch.fail(fmt.Errorf("create pod: %w", err))
		return
	}
	h := podHandle(node, np, time.Now().UTC(), nil)
	if _, err := ch.c.alloc.Allocate(ctx, allocator.Request{Handle: h, Sets: [][]string{{poolV4}, {poolV6}}}); err != nil {
		ch.fail(fmt.Errorf("allocate for %s: %w", np.name, err))
		return
	}
	ch.c.addPod(node, np)
	ch.done.Add(1)
}

func (ch *churn) fail(err error) {
	ch.failed.Add(1)
	ch.firstErr.CompareAndSwap(nil, err.Error())
}

// leak deletes n pods on distinct unfrozen nodes without releasing their
// allocations (the node's DEL never came), and freezes those nodes; it
// returns the pods' keys ("namespace/name", as the controller logs them)
// and when the last delete returned.
func (c *cluster) leak(ctx context.Context, n int, rng *rand.Rand) ([]string, time.Time, error) {
	var keys []string
	for _, i := range rng.Perm(len(c.nodes)) {
		if len(keys) == n {
			break
		}
		node := c.nodes[i]
		p, ok := c.takePod(node, rng)
		if !ok {
			continue
		}
		c.freeze(node)
		if err := c.deletePod(ctx, p.name); err != nil {
			return nil, time.Time{}, err
		}
		keys = append(keys, podNamespace+"/"+p.name)
	}
	return keys, time.Now(), nil
}

// deleteNodes deletes the Node objects of n unfrozen nodes (the nodes
// died; their pods stay, bound to them), freezes them and returns them.
func (c *cluster) deleteNodes(ctx context.Context, n int) ([]string, time.Time, error) {
	var gone []string
	for i := len(c.nodes) - 1; i >= 0 && len(gone) < n; i-- {
		node := c.nodes[i]
		if !c.freeze(node) {
			continue
		}
		if err := c.client.CoreV1().Nodes().Delete(ctx, node, deleteNow()); err != nil {
			return nil, time.Time{}, err
		}
		gone = append(gone, node)
	}
	return gone, time.Now(), nil
}

func deleteNow() metav1.DeleteOptions {
	zero := int64(0)
	return metav1.DeleteOptions{GracePeriodSeconds: &zero}
}
