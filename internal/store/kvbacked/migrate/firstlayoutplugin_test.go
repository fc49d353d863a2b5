package migrate_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// The earlier version's errors its ADD failed with: a pool missing or
// marked Deleting (CNI 101, the kubelet retries), a config defining a pool
// otherwise than it is stored.
var (
	errNoPool       = errors.New("first layout: no usable pool")
	errPoolConflict = errors.New("first layout: pool stored otherwise")
)

// firstLayoutPlugin plays a plugin of the earlier version on a node not yet
// upgraded, on the first layout's keys:
//
//	pools/<pool>                    ipam.Pool JSON
//	blocks/<pool>/<cidr, "/" as "-">  ipam.Block JSON
//	affinity/<node>/<pool>/<cidr>   the block's key
//	handles/<id>                    ipam.Handle JSON
//
// and with the guards the fence relies on: its ADD reads its pools,
// refuses one missing or marked Deleting, and commits the handle and its
// blocks in one transaction guarded by the versions of the pools and
// blocks it read (a pool changed meanwhile makes it read again); a pool
// its config defines is (re)written only over an imported one. Its DEL
// frees the handle's addresses and deletes the handle, guarded by their
// versions, and reads no pool. It takes the first block of a pool
// affine to its node with room, else claims the first unused one.
type firstLayoutPlugin struct{ s kv.Store }

func firstBlockKey(pool string, cidr netip.Prefix) string {
	return "blocks/" + pool + "/" + strings.Replace(cidr.String(), "/", "-", 1)
}

// encode is the first layout's value encoding (of plain data: it cannot
// fail).
func encode(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// createPool writes p as the earlier version's `pool add` or an import did.
func (o firstLayoutPlugin) createPool(t testing.TB, p ipam.Pool) {
	t.Helper()
	if err := o.s.Txn(context.Background(), []kv.Cond{{Key: "pools/" + p.Name}}, []kv.Op{{Key: "pools/" + p.Name, Value: encode(p)}}); err != nil {
		t.Fatal(err)
	}
}

// pool reads a first-layout pool key.
func (o firstLayoutPlugin) pool(t testing.TB, name string) ipam.Pool {
	t.Helper()
	es, err := o.s.Get(context.Background(), "pools/"+name)
	if err != nil || es[0].Version == 0 {
		t.Fatalf("first-layout pool %s: %v, version %d", name, err, es[0].Version)
	}
	var p ipam.Pool
	if err := json.Unmarshal(es[0].Value, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// allocate is the earlier version's ADD of h: one address from each pool
// named, after the pools of define are reconciled with the stored ones.
func (o firstLayoutPlugin) allocate(ctx context.Context, h ipam.Handle, pools []string, define ...ipam.Pool) (ipam.Handle, error) {
	for range 50 { // bounded: conflicts with other plugins and the migration
		got, err := o.tryAllocate(ctx, h, pools, define)
		if !errors.Is(err, store.ErrConflict) {
			return got, err
		}
	}
	return ipam.Handle{}, fmt.Errorf("allocate %s: kept conflicting", h.ID)
}

func (o firstLayoutPlugin) tryAllocate(ctx context.Context, h ipam.Handle, pools []string, define []ipam.Pool) (ipam.Handle, error) {
	var conds []kv.Cond
	var ops []kv.Op
	defs := map[string]ipam.Pool{}
	for _, d := range define {
		defs[d.Name] = d
	}
	for _, name := range pools {
		es, err := o.s.Get(ctx, "pools/"+name)
		if err != nil {
			return ipam.Handle{}, err
		}
		var p ipam.Pool
		if es[0].Version != 0 {
			if err := json.Unmarshal(es[0].Value, &p); err != nil {
				return ipam.Handle{}, err
			}
		}
		conds = append(conds, kv.Cond{Key: es[0].Key, Version: es[0].Version})
		if d, ok := defs[name]; ok && (es[0].Version == 0 || !p.SameDefinition(d)) {
			if es[0].Version != 0 && (p.Origin != "import" || p.CIDR != d.CIDR || p.BlockSize != d.BlockSize) {
				return ipam.Handle{}, fmt.Errorf("%w: %s", errPoolConflict, name)
			}
			p = d
			ops = append(ops, kv.Op{Key: es[0].Key, Value: encode(d)})
		} else if es[0].Version == 0 || p.Deleting {
			return ipam.Handle{}, fmt.Errorf("%w: %s", errNoPool, name)
		}
		blk, at, err := o.block(ctx, p, h.Node)
		if err != nil {
			return ipam.Handle{}, err
		}
		key := firstBlockKey(p.Name, blk.CIDR)
		if at == 0 {
			ops = append(ops, kv.Op{Key: "affinity/" + h.Node + "/" + strings.TrimPrefix(key, "blocks/"), Value: []byte(key)})
		}
		blk, addr, err := blk.Assign(p, h.ID)
		if err != nil {
			return ipam.Handle{}, err
		}
		conds = append(conds, kv.Cond{Key: key, Version: at})
		ops = append(ops, kv.Op{Key: key, Value: encode(blk)})
		h.IPs = append(h.IPs, ipam.HandleIP{Addr: addr, Pool: p.Name, Block: blk.CIDR})
	}
	conds = append(conds, kv.Cond{Key: "handles/" + h.ID})
	ops = append(ops, kv.Op{Key: "handles/" + h.ID, Value: encode(h)})
	return h, o.s.Txn(ctx, conds, ops)
}

// block returns the block of p node allocates from and its version (0:
// a block it claims).
func (o firstLayoutPlugin) block(ctx context.Context, p ipam.Pool, node string) (ipam.Block, int64, error) {
	es, err := o.s.List(ctx, "blocks/"+p.Name+"/")
	if err != nil {
		return ipam.Block{}, 0, err
	}
	used := map[string]bool{}
	for _, e := range es {
		used[e.Key] = true
		var b ipam.Block
		if err := json.Unmarshal(e.Value, &b); err != nil {
			return ipam.Block{}, 0, err
		}
		if b.Node == node && b.FreeCount(p) > 0 {
			return b, e.Version, nil
		}
	}
	for i := range uint64(256) {
		cidr := p.BlockAt(i)
		if !used[firstBlockKey(p.Name, cidr)] {
			return ipam.NewBlock(p, cidr, node), 0, nil
		}
	}
	return ipam.Block{}, 0, fmt.Errorf("%w: %s is full", errNoPool, p.Name)
}

// release is the earlier version's DEL of handle id: the addresses it
// freed (none when the handle does not exist).
func (o firstLayoutPlugin) release(ctx context.Context, id string) ([]netip.Addr, error) {
	for range 50 { // bounded: conflicts with other plugins and the migration
		freed, err := o.tryRelease(ctx, id)
		if !errors.Is(err, store.ErrConflict) {
			return freed, err
		}
	}
	return nil, fmt.Errorf("release %s: kept conflicting", id)
}

func (o firstLayoutPlugin) tryRelease(ctx context.Context, id string) ([]netip.Addr, error) {
	es, err := o.s.Get(ctx, "handles/"+id)
	if err != nil || es[0].Version == 0 {
		return nil, err
	}
	var h ipam.Handle
	if err := json.Unmarshal(es[0].Value, &h); err != nil {
		return nil, err
	}
	conds := []kv.Cond{{Key: es[0].Key, Version: es[0].Version}}
	ops := []kv.Op{{Key: es[0].Key, Delete: true}}
	var freed []netip.Addr
	for _, ip := range h.IPs {
		key := firstBlockKey(ip.Pool, ip.Block)
		bs, err := o.s.Get(ctx, key)
		if err != nil {
			return nil, err
		}
		var b ipam.Block
		if err := json.Unmarshal(bs[0].Value, &b); err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		if b, err = b.Release(ip.Addr, id); err != nil {
			return nil, err
		}
		conds = append(conds, kv.Cond{Key: key, Version: bs[0].Version})
		ops = append(ops, kv.Op{Key: key, Value: encode(b)})
		freed = append(freed, ip.Addr)
	}
	return freed, o.s.Txn(ctx, conds, ops)
}
