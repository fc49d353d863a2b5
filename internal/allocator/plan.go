package allocator

import (
	"context"
	"net/netip"
	"slices"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
)

// plan gathers what one transaction read and what it will write, so that
// the commit is guarded by the versions of everything it depends on.
type plan struct {
	store  kv.Store
	cache  *blockCache
	blocks map[string]*planBlock
	order  []string // block keys in first-touch order, for stable ops
	conds  []kv.Cond
	ops    []kv.Op
}

type planBlock struct {
	block   ipam.Block
	raw     []byte // the value as read, or as written by commit
	version int64
	exists  bool
	dirty   bool
	written bool // by the plan's commit
}

func (a *Allocator) newPlan() *plan {
	return &plan{store: a.store, cache: &a.decoded, blocks: map[string]*planBlock{}}
}

// remember records a block read from the store.
func (p *plan) remember(e kv.KeyValue) error {
	if _, ok := p.blocks[e.Key]; ok {
		return nil
	}
	pb := &planBlock{version: e.Version, exists: e.Version != 0, raw: e.Value}
	if pb.exists {
		b, ok := p.cache.get(e.Key, e.Version)
		if !ok {
			var err error
			if b, err = decode[ipam.Block](e); err != nil {
				return err
			}
			p.cache.put(e.Key, e.Version, b)
		}
		pb.block = b
	}
	p.blocks[e.Key] = pb
	p.order = append(p.order, e.Key)
	return nil
}

// forget drops a block the plan has not changed, so that it can be
// remembered again from a fresh read.
func (p *plan) forget(key string) {
	if pb := p.blocks[key]; pb != nil && !pb.dirty {
		delete(p.blocks, key)
		p.order = slices.DeleteFunc(p.order, func(k string) bool { return k == key })
	}
}

// block returns the planned state of a block, reading it when unseen.
func (p *plan) block(ctx context.Context, pool string, cidr netip.Prefix) (*planBlock, error) {
	key := BlockKey(pool, cidr)
	if pb, ok := p.blocks[key]; ok {
		return pb, nil
	}
	es, err := p.store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	if err := p.remember(es[0]); err != nil {
		return nil, err
	}
	return p.blocks[key], nil
}

// update replaces a block's planned state.
func (p *plan) update(key string, b ipam.Block) {
	pb := p.blocks[key]
	pb.block = b
	pb.dirty = true
}

// commit writes every dirty block, plus extra conds and ops, in one
// transaction guarded by the version of every dirty block. It returns the
// version the written keys got (0 when the store cannot tell) and records
// each dirty block's new value and version in the plan.
func (p *plan) commit(ctx context.Context, conds []kv.Cond, ops []kv.Op) (int64, error) {
	var written []*planBlock
	for _, key := range p.order {
		pb := p.blocks[key]
		if !pb.dirty {
			continue
		}
		raw := Encode(pb.block)
		conds = append(conds, kv.Cond{Key: key, Version: pb.version})
		ops = append(ops, kv.Op{Key: key, Value: raw})
		pb.raw = raw
		written = append(written, pb)
	}
	conds = append(conds, p.conds...)
	ops = append(ops, p.ops...)
	rev, err := kv.TxnRevision(ctx, p.store, conds, ops)
	if err != nil {
		return 0, err
	}
	for _, pb := range written {
		pb.version, pb.exists, pb.dirty, pb.written = rev, true, false, true
		p.cache.put(BlockKey(pb.block.Pool, pb.block.CIDR), rev, pb.block)
	}
	return rev, nil
}

// refreshHint brings the hints of the nodes whose blocks the plan wrote
// up to date, so that their next allocation need not read them; a block
// written with an unknown version drops its node's hint.
func (a *Allocator) refreshHint(p *plan) {
	nodes := map[string]bool{}
	for _, pb := range p.blocks {
		if pb.written && pb.block.Node != "" {
			nodes[pb.block.Node] = true
		}
	}
	for node := range nodes {
		h, ok := a.hints.Load(node)
		if !ok {
			continue
		}
		for i, e := range h.Entries {
			pb := p.blocks[e.Key]
			if pb == nil || !pb.written {
				continue
			}
			if pb.version == 0 {
				a.hints.Forget(node)
				ok = false
				break
			}
			h.Entries[i] = kv.KeyValue{Key: e.Key, Value: pb.raw, Version: pb.version}
		}
		if ok {
			a.hints.Store(node, h)
		}
	}
}
