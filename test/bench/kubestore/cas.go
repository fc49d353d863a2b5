package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipkeeper/ipkeeper/test/bench/latency"
)

// A CAS measurement: nodes "nodes", each running one operation at a time
// (the plugin's node lock, or an agent per node), each keeping its own
// last-known copy of the object it writes (what a per-node agent or hint
// keeps) and writing it back with a version precondition: one write per
// operation while nobody else wrote the object, a re-read and retry on a
// conflict. Operations alternate between allocating and releasing so the
// objects stay between lo and hi handles per node.

type casMode struct {
	name string
	res  string
	// shared puts all nodes' blocks in one object.
	shared bool
	// compact keeps only the handle ID in block owner records.
	compact bool
}

var casModes = []casMode{
	{"block (1 object per node, v4 only)", resBlock, false, false},
	{"node (1 object per node, dual-stack)", resNode, false, false},
	{"shared (all nodes in 1 object, dual-stack)", resNode, true, false},
}

// view is one node's last-known copy of its object.
type view struct {
	spec any
	ver  string
	up   bool
}

type casCell struct {
	b      backend
	m      casMode
	nodes  int
	lo, hi int
	prefix string
	names  []string // object name per node
	labels []map[string]string
	views  []view
	locks  []sync.Mutex
	// conflicts counts failed compare-and-swaps, writes every attempt.
	conflicts, writes atomic.Int64
}

func casNode(n int) string { return fmt.Sprintf("cas-node-%02d", n) }

// setup creates the cell's objects, each node holding lo handles.
func setup(ctx context.Context, b backend, m casMode, nodes, blocks, lo, hi int, prefix string) (*casCell, error) {
	c := &casCell{b: b, m: m, nodes: nodes, lo: lo, hi: hi, prefix: prefix, names: make([]string, nodes),
		labels: make([]map[string]string, nodes), views: make([]view, nodes), locks: make([]sync.Mutex, nodes)}
	shared := nodeSpec{Node: "shared", Blocks: map[string]nodeBlock{}, Handles: map[string]handleRec{}}
	for n := range nodes {
		node := casNode(n)
		c.labels[n] = map[string]string{"ipkeeper.io/node": node}
		switch {
		case m.res == resBlock:
			v4, _ := nodeCIDRs(n, 0)
			bs := newBlock(v4, node)
			for range lo {
				bs.assign(c.owner(node))
			}
			c.names[n] = prefix + objName(v4)
			c.views[n].spec = bs
		case !m.shared:
			s := nodeSpec{Node: node, Blocks: map[string]nodeBlock{}, Handles: map[string]handleRec{}}
			s.addNode("", node, n, blocks)
			for range lo {
				s.assignDual("", newOwner(node))
			}
			c.names[n] = prefix + node
			c.views[n].spec = s
		default:
			shared.addNode(node+".", node, n, blocks)
			for range lo {
				shared.assignDual(node+".", newOwner(node))
			}
			c.names[n] = prefix + "shared"
			c.labels[n] = nil
		}
	}
	if m.shared {
		ver, err := b.create(ctx, m.res, c.names[0], nil, shared)
		if err != nil {
			return nil, err
		}
		for n := range nodes {
			c.views[n] = view{spec: shared, ver: ver}
		}
		return c, nil
	}
	for n := range nodes {
		ver, err := b.create(ctx, m.res, c.names[n], c.labels[n], c.views[n].spec)
		if err != nil {
			return nil, err
		}
		c.views[n].ver = ver
	}
	return c, nil
}

// count is how many handles node n holds in spec.
func (c *casCell) count(spec any, n int) int {
	switch s := spec.(type) {
	case blockSpec:
		return len(s.Owners)
	case nodeSpec:
		return s.handlesOf(casNode(n))
	}
	return 0
}

// mutate allocates (up) or releases one handle of node n.
func (c *casCell) mutate(spec any, n int, up bool) any {
	node := casNode(n)
	prefix := ""
	if c.m.shared {
		prefix = node + "."
	}
	switch s := spec.(type) {
	case blockSpec:
		b := s.clone()
		if up {
			b.assign(c.owner(node))
		} else {
			b.releaseOldest()
		}
		return b
	case nodeSpec:
		x := s.clone()
		if up {
			x.assignDual(prefix, newOwner(node))
		} else {
			x.releaseOldest(node)
		}
		return x
	}
	panic("unknown spec")
}

// op is one allocation or release on node n: one write when the node's
// view is current.
func (c *casCell) op(ctx context.Context, n int) error {
	c.locks[n].Lock()
	defer c.locks[n].Unlock()
	v := &c.views[n]
	cnt := c.count(v.spec, n)
	if cnt >= c.hi {
		v.up = false
	} else if cnt <= c.lo {
		v.up = true
	}
	for range 200 {
		next := c.mutate(v.spec, n, v.up)
		c.writes.Add(1)
		ver, err := c.b.update(ctx, c.m.res, c.names[n], c.labels[n], v.spec, next, v.ver)
		if err == nil {
			v.spec, v.ver = next, ver
			return nil
		}
		if !errors.Is(err, errConflict) {
			return err
		}
		c.conflicts.Add(1)
		raw, ver, err := c.b.get(ctx, c.m.res, c.names[n])
		if err != nil {
			return err
		}
		spec, err := decodeSpec(c.m.res, raw)
		if err != nil {
			return err
		}
		v.spec, v.ver = spec, ver
	}
	return fmt.Errorf("node %d: still conflicting after 200 attempts", n)
}

func decodeSpec(res string, raw []byte) (any, error) {
	if res == resNode {
		var s nodeSpec
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var s blockSpec
	err := json.Unmarshal(raw, &s)
	return s, err
}

// nodePatch is the JSON merge patch from prev to next node specs: changed
// free queues, owners and handles only (null deletes).
func nodePatch(prev, next nodeSpec) map[string]any {
	blocks := map[string]any{}
	for k, nb := range next.Blocks {
		pb := prev.Blocks[k]
		ch := map[string]any{}
		if !slices.Equal(pb.Free, nb.Free) {
			ch["free"] = nb.Free
		}
		owners := map[string]any{}
		for o, h := range nb.Owners {
			if pb.Owners[o] != h {
				owners[o] = h
			}
		}
		for o := range pb.Owners {
			if _, ok := nb.Owners[o]; !ok {
				owners[o] = nil
			}
		}
		if len(owners) > 0 {
			ch["owners"] = owners
		}
		if len(ch) > 0 {
			blocks[k] = ch
		}
	}
	handles := map[string]any{}
	for id, h := range next.Handles {
		if _, ok := prev.Handles[id]; !ok {
			handles[id] = h
		}
	}
	for id := range prev.Handles {
		if _, ok := next.Handles[id]; !ok {
			handles[id] = nil
		}
	}
	return map[string]any{"blocks": blocks, "handles": handles}
}

// run measures the cell at concurrency conc for d: worker w's i-th
// operation is on node (w + i*conc) mod nodes.
func (c *casCell) run(ctx context.Context, conc int, d time.Duration) latency.Result {
	return latency.Measure(conc, d, func(w, i int) error { return c.op(ctx, (w+i*conc)%c.nodes) })
}

// owner is a new owner record for node, compact when the mode says.
func (c *casCell) owner(node string) owner {
	o := newOwner(node)
	if c.m.compact {
		return o.compact()
	}
	return o
}
