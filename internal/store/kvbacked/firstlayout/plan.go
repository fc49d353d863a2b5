package firstlayout

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
	// hinted blocks came from a hint, not from the store: raw is what the
	// hint said, and a commit that changes the block is guarded by raw
	// itself besides the version (see remember).
	hinted bool
}

func (a *Allocator) newPlan() *plan {
	return &plan{store: a.store, cache: &a.decoded, blocks: map[string]*planBlock{}}
}

// remember records a block read from the store. A block that fails
// validation is refused (allocator.ErrCorrupt).
func (p *plan) remember(e kv.KeyValue) error { return p.add(e, false) }

// rememberHinted records a block entry taken from a hint.
//
// A hint may save reads but never decide: the block is validated like a
// read one (a forged ordinal -1, 2^40 or one outside the block is refused,
// and the caller reads the store instead), and a commit that changes it is
// guarded by the hinted bytes as well as the version (kv.Cond.Value). A
// version alone does not prove a value: a hint file edited to put a held
// ordinal at the front of the free queue keeps a valid block and the right
// version. The value condition makes the store itself confirm, in the
// transaction, that the block the allocator computed from is the stored
// one, whoever wrote the hint — without a read, and without a secret that
// whoever can write hint files might also read. It costs the block's bytes
// once more in the request, only when a hinted block is written.
func (p *plan) rememberHinted(e kv.KeyValue) error { return p.add(e, true) }

func (p *plan) add(e kv.KeyValue, hinted bool) error {
	if _, ok := p.blocks[e.Key]; ok {
		return nil
	}
	pb := &planBlock{version: e.Version, exists: e.Version != 0, raw: e.Value, hinted: hinted && e.Version != 0}
	if pb.exists {
		b, ok := p.cache.get(e.Key, e.Version, e.Value)
		if !ok {
			var err error
			if b, err = decodeBlock(e); err != nil {
				return err
			}
			// The cache matches bytes, so caching what a hint said is
			// safe: it is found only for these very bytes.
			p.cache.put(e.Key, e.Version, e.Value, b)
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
	var raws [][]byte
	for _, key := range p.order {
		pb := p.blocks[key]
		if !pb.dirty {
			continue
		}
		raw := Encode(pb.block)
		c := kv.Cond{Key: key, Version: pb.version}
		if pb.hinted {
			c.Value = pb.raw
		}
		conds = append(conds, c)
		ops = append(ops, kv.Op{Key: key, Value: raw})
		written, raws = append(written, pb), append(raws, raw)
	}
	conds = append(conds, p.conds...)
	ops = append(ops, p.ops...)
	rev, err := kv.TxnRevision(ctx, p.store, conds, ops)
	if err != nil {
		return 0, err
	}
	for i, pb := range written {
		pb.raw, pb.version, pb.exists, pb.dirty, pb.written, pb.hinted = raws[i], rev, true, false, true, false
		p.cache.put(BlockKey(pb.block.Pool, pb.block.CIDR), rev, pb.raw, pb.block)
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
