package allocator

import (
	"context"
	"net/netip"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
)

// plan gathers what one transaction read and what it will write, so that
// the commit is guarded by the versions of everything it depends on.
type plan struct {
	store  kv.Store
	blocks map[string]*planBlock
	order  []string // block keys in first-touch order, for stable ops
	conds  []kv.Cond
	ops    []kv.Op
}

type planBlock struct {
	block   ipam.Block
	version int64
	exists  bool
	dirty   bool
}

func newPlan(s kv.Store) *plan {
	return &plan{store: s, blocks: map[string]*planBlock{}}
}

// remember records a block read from the store.
func (p *plan) remember(e kv.KeyValue) error {
	if _, ok := p.blocks[e.Key]; ok {
		return nil
	}
	pb := &planBlock{version: e.Version, exists: e.Version != 0}
	if pb.exists {
		b, err := decode[ipam.Block](e)
		if err != nil {
			return err
		}
		pb.block = b
	}
	p.blocks[e.Key] = pb
	p.order = append(p.order, e.Key)
	return nil
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
// transaction guarded by the version of every dirty block.
func (p *plan) commit(ctx context.Context, conds []kv.Cond, ops []kv.Op) error {
	for _, key := range p.order {
		pb := p.blocks[key]
		if !pb.dirty {
			continue
		}
		conds = append(conds, kv.Cond{Key: key, Version: pb.version})
		ops = append(ops, kv.Op{Key: key, Value: encode(pb.block)})
	}
	conds = append(conds, p.conds...)
	ops = append(ops, p.ops...)
	return p.store.Txn(ctx, conds, ops)
}
