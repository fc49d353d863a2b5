package allocator_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// The model-based test runs thousands of random operations against a real
// store and, after each one, compares the allocator's whole state with a
// plain model of who holds what. Set IPKEEPER_MODEL_SEED to replay a run
// and IPKEEPER_MODEL_OPS to change its length.

// mPool is the model's view of a pool: its blocks and, per block, the
// addresses the pool permits.
type mPool struct {
	pool      ipam.Pool
	blocks    []netip.Prefix
	permitted map[netip.Prefix][]netip.Addr
}

// model is who holds what, which node claimed which block, and which
// addresses each handle has.
type model struct {
	pools   map[string]*mPool
	owner   map[netip.Addr]string
	handles map[string][]netip.Addr
	claimed map[netip.Prefix]string // block -> node
}

func newModel(pools []ipam.Pool) *model {
	m := &model{pools: map[string]*mPool{}, owner: map[netip.Addr]string{},
		handles: map[string][]netip.Addr{}, claimed: map[netip.Prefix]string{}}
	for _, p := range pools {
		mp := &mPool{pool: p, permitted: map[netip.Prefix][]netip.Addr{}}
		for i := range p.NumBlocks() {
			blk := p.BlockAt(i)
			mp.blocks = append(mp.blocks, blk)
			for a := blk.Addr(); blk.Contains(a); a = a.Next() {
				if p.Permits(a) {
					mp.permitted[blk] = append(mp.permitted[blk], a)
				}
			}
		}
		m.pools[p.Name] = mp
	}
	return m
}

func (m *model) free(mp *mPool, blk netip.Prefix) int {
	n := 0
	for _, a := range mp.permitted[blk] {
		if m.owner[a] == "" {
			n++
		}
	}
	return n
}

// candidates returns the blocks an allocation for node must come from in
// pool p: its own blocks with room, else unclaimed blocks with room (a
// claim), else — unless the pool is strict — others' blocks with room.
func (m *model) candidates(mp *mPool, node string) (blocks []netip.Prefix, claim bool) {
	var own, unclaimed, others []netip.Prefix
	for _, blk := range mp.blocks {
		if m.free(mp, blk) == 0 {
			continue
		}
		switch m.claimed[blk] {
		case node:
			own = append(own, blk)
		case "":
			unclaimed = append(unclaimed, blk)
		default:
			others = append(others, blk)
		}
	}
	switch {
	case len(own) > 0:
		return own, false
	case len(unclaimed) > 0:
		return unclaimed, true
	case !mp.pool.StrictAffinity:
		return others, false
	}
	return nil, false
}

// hasFree is what HasFree must answer.
func (m *model) hasFree(mp *mPool, node string) bool {
	blocks, _ := m.candidates(mp, node)
	return len(blocks) > 0
}

func (m *model) blockOf(a netip.Addr) (*mPool, netip.Prefix, bool) {
	for _, mp := range m.pools {
		if mp.pool.CIDR.Contains(a) {
			blk, _ := a.Prefix(mp.pool.BlockSize)
			return mp, blk, true
		}
	}
	return nil, netip.Prefix{}, false
}

func (m *model) take(a netip.Addr, handle, node string) {
	m.owner[a] = handle
	m.handles[handle] = append(m.handles[handle], a)
	if _, blk, _ := m.blockOf(a); m.claimed[blk] == "" {
		m.claimed[blk] = node
	}
}

func (m *model) drop(a netip.Addr) {
	h := m.owner[a]
	delete(m.owner, a)
	m.handles[h] = slices.DeleteFunc(m.handles[h], func(x netip.Addr) bool { return x == a })
	if len(m.handles[h]) == 0 {
		delete(m.handles, h)
	}
}

// modelRun is one random run.
type modelRun struct {
	t      *testing.T
	rng    *rand.Rand
	a      *allocator.Allocator
	m      *model
	nodes  []string
	kinds  [][][]string // request shapes: sets of pool names
	nextID int
	stats  map[string]int
}

func TestModelRandomOps(t *testing.T) {
	seed := uint64(rand.Int64())
	if s := os.Getenv("IPKEEPER_MODEL_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("IPKEEPER_MODEL_SEED: %v", err)
		}
	}
	ops := 3000
	if testing.Short() {
		ops = 500
	}
	if s := os.Getenv("IPKEEPER_MODEL_OPS"); s != "" {
		var err error
		if ops, err = strconv.Atoi(s); err != nil {
			t.Fatalf("IPKEEPER_MODEL_OPS: %v", err)
		}
	}
	t.Logf("seed %d, %d operations (replay with IPKEEPER_MODEL_SEED=%d)", seed, ops, seed)

	pools := []ipam.Pool{
		{Name: "a4", CIDR: prefix("10.2.0.0/27"), BlockSize: 29, Gateway: addr("10.2.0.1"), Exclude: []netip.Prefix{prefix("10.2.0.20/30")}},
		{Name: "s4", CIDR: prefix("10.3.0.0/28"), BlockSize: 29, StrictAffinity: true},
		{Name: "a6", CIDR: prefix("fd02::/124"), BlockSize: 125, RangeStart: addr("fd02::2"), RangeEnd: addr("fd02::e")},
		{Name: "c6", CIDR: prefix("fd03::/125"), BlockSize: 125, Gateway: addr("fd03::1")},
	}
	a, _ := setup(t, pools...)
	r := &modelRun{
		t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), a: a, m: newModel(pools),
		nodes: []string{"n1", "n2", "n3", "n4"},
		kinds: [][][]string{
			{{"a4"}}, {{"s4"}}, {{"a6", "c6"}}, {{"a4"}, {"a6", "c6"}}, {{"s4"}, {"a6"}},
		},
		stats: map[string]int{},
	}
	for i := range ops {
		desc := r.step()
		r.compare(fmt.Sprintf("op %d (%s)", i, desc))
		if t.Failed() {
			t.FailNow()
		}
	}
	t.Logf("outcomes: %v", r.stats)
	for _, k := range []string{"own", "claim", "borrow", "exhausted", "want", "want-refused", "release", "release-addr", "idempotent"} {
		if r.stats[k] == 0 {
			t.Errorf("the run never exercised %q: the test setup no longer covers it", k)
		}
	}
}

func (r *modelRun) step() string {
	switch x := r.rng.IntN(100); {
	case x < 45:
		return r.allocate()
	case x < 70:
		return r.release()
	case x < 88:
		return r.releaseAddr()
	default:
		return r.checkHasFree()
	}
}

func (r *modelRun) allocate() string {
	t, m := r.t, r.m
	ctx := context.Background()
	node := r.nodes[r.rng.IntN(len(r.nodes))]
	sets := r.kinds[r.rng.IntN(len(r.kinds))]

	// An existing handle: the stored one comes back, nothing changes.
	if len(m.handles) > 0 && r.rng.IntN(10) < 2 {
		ids := slices.Sorted(maps.Keys(m.handles))
		id := ids[r.rng.IntN(len(ids))]
		h, err := r.a.Allocate(ctx, request(node, id, sets...))
		if err != nil {
			t.Fatalf("repeated Allocate(%s): %v", id, err)
		}
		var got []netip.Addr
		for _, ip := range h.IPs {
			got = append(got, ip.Addr)
		}
		if !slices.Equal(got, m.handles[id]) {
			t.Fatalf("repeated Allocate(%s) = %v, model %v", id, got, m.handles[id])
		}
		r.stats["idempotent"]++
		return "allocate existing " + id
	}

	r.nextID++
	id := fmt.Sprintf("h%d", r.nextID)
	req := request(node, id, sets...)
	var want netip.Addr
	if r.rng.IntN(10) == 0 {
		// A wish: any address of the first set's first pool, reserved
		// ones included, or now and then one of no pool.
		mp := m.pools[sets[0][0]]
		blk := mp.blocks[r.rng.IntN(len(mp.blocks))]
		want = blk.Addr()
		for range r.rng.IntN(8) {
			want = want.Next()
		}
		if r.rng.IntN(10) == 0 {
			want = addr("192.0.2.7")
		}
		req.Want = []netip.Addr{want}
	}
	desc := fmt.Sprintf("allocate %s on %s from %v want %v", id, node, sets, want)

	// Predict, set by set, what the allocator must do. Sets never share a
	// pool, so one set's choice does not change the next one's.
	type expect struct {
		blocks []netip.Prefix // the address must come from one of these
		pool   string
		claim  bool
		want   bool
	}
	var exp []expect
	var expErr error
	wantSeen := false
	for _, set := range sets {
		var e expect
		for _, name := range set {
			mp := m.pools[name]
			if !want.IsValid() || !mp.pool.CIDR.Contains(want) {
				continue
			}
			wantSeen = true
			if !mp.pool.Permits(want) || m.owner[want] != "" {
				expErr = allocator.ErrAddrUnavailable
			}
			blk, _ := want.Prefix(mp.pool.BlockSize)
			e = expect{blocks: []netip.Prefix{blk}, pool: name, want: true, claim: m.claimed[blk] == ""}
			break
		}
		for _, name := range set {
			if e.pool != "" {
				break
			}
			if blocks, claim := m.candidates(m.pools[name], node); len(blocks) > 0 {
				e = expect{blocks: blocks, pool: name, claim: claim}
			}
		}
		if e.pool == "" {
			expErr = allocator.ErrExhausted
		}
		if expErr != nil {
			break
		}
		exp = append(exp, e)
	}
	if want.IsValid() && !wantSeen && expErr == nil {
		expErr = allocator.ErrAddrUnavailable // a wish in no pool of the request
	}

	h, err := r.a.Allocate(ctx, req)
	if expErr != nil {
		if !errors.Is(err, expErr) {
			t.Fatalf("%s = %+v, %v; model expects %v", desc, h, err, expErr)
		}
		if errors.Is(err, allocator.ErrExhausted) {
			r.stats["exhausted"]++
		} else {
			r.stats["want-refused"]++
		}
		return desc + ": " + err.Error()
	}
	if err != nil {
		t.Fatalf("%s: %v; model expects success %+v", desc, err, exp)
	}
	if len(h.IPs) != len(exp) {
		t.Fatalf("%s = %+v, want %d addresses", desc, h, len(exp))
	}
	for i, ip := range h.IPs {
		e := exp[i]
		blk, _ := ip.Addr.Prefix(m.pools[e.pool].pool.BlockSize)
		switch {
		case ip.Pool != e.pool:
			t.Fatalf("%s: set %d from pool %s, model expects %s", desc, i, ip.Pool, e.pool)
		case !slices.Contains(e.blocks, blk) || ip.Block != blk:
			t.Fatalf("%s: %s in block %s, model expects one of %v (claim %v)", desc, ip.Addr, ip.Block, e.blocks, e.claim)
		case e.want && ip.Addr != want:
			t.Fatalf("%s: got %s instead of the wish", desc, ip.Addr)
		case m.owner[ip.Addr] != "" || !m.pools[e.pool].pool.Permits(ip.Addr):
			t.Fatalf("%s: %s is held by %q or not permitted", desc, ip.Addr, m.owner[ip.Addr])
		}
		switch {
		case e.want:
			r.stats["want"]++
		case e.claim:
			r.stats["claim"]++
		case m.claimed[blk] == node:
			r.stats["own"]++
		default:
			r.stats["borrow"]++
		}
		m.take(ip.Addr, id, node)
	}
	return desc
}

func (r *modelRun) release() string {
	t, m := r.t, r.m
	id := "never-allocated"
	if len(m.handles) > 0 && r.rng.IntN(10) < 8 {
		ids := slices.Sorted(maps.Keys(m.handles))
		id = ids[r.rng.IntN(len(ids))]
	}
	freed, err := r.a.Release(context.Background(), id)
	if err != nil || !slices.Equal(freed, m.handles[id]) {
		t.Fatalf("Release(%s) = %v, %v; model %v", id, freed, err, m.handles[id])
	}
	for _, a := range freed {
		m.drop(a)
	}
	r.stats["release"]++
	return "release " + id
}

func (r *modelRun) releaseAddr() string {
	t, m := r.t, r.m
	names := slices.Sorted(maps.Keys(m.pools))
	mp := m.pools[names[r.rng.IntN(len(names))]]
	blk := mp.blocks[r.rng.IntN(len(mp.blocks))]
	perm := mp.permitted[blk]
	target := perm[r.rng.IntN(len(perm))]
	holder := m.owner[target]
	before := slices.Clone(m.handles[holder])
	h, err := r.a.ReleaseAddr(context.Background(), target)
	if holder == "" {
		if !errors.Is(err, allocator.ErrNotAllocated) {
			t.Fatalf("ReleaseAddr(%s) of a free address = %+v, %v", target, h, err)
		}
		return "release free " + target.String()
	}
	var got []netip.Addr
	for _, ip := range h.IPs {
		got = append(got, ip.Addr)
	}
	if err != nil || h.ID != holder || !slices.Equal(got, before) {
		t.Fatalf("ReleaseAddr(%s) = %+v, %v; model: held by %s with %v", target, h, err, holder, before)
	}
	m.drop(target)
	r.stats["release-addr"]++
	return "release address " + target.String()
}

func (r *modelRun) checkHasFree() string {
	names := slices.Sorted(maps.Keys(r.m.pools))
	mp := r.m.pools[names[r.rng.IntN(len(names))]]
	node := r.nodes[r.rng.IntN(len(r.nodes))]
	got, err := r.a.HasFree(context.Background(), mp.pool, node)
	if want := r.m.hasFree(mp, node); err != nil || got != want {
		r.t.Fatalf("HasFree(%s, %s) = %v, %v; model %v", mp.pool.Name, node, got, err, want)
	}
	return "has free " + mp.pool.Name + " " + node
}

// compare checks the allocator's whole state against the model.
func (r *modelRun) compare(after string) {
	t, m := r.t, r.m
	t.Helper()
	owners := checkConsistent(t, r.a, r.a.Store())
	if !maps.Equal(owners, m.owner) {
		t.Fatalf("after %s: owners %v, model %v", after, owners, m.owner)
	}
	hs, err := r.a.Handles(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != len(m.handles) {
		t.Fatalf("after %s: %d handles, model %d", after, len(hs), len(m.handles))
	}
	for _, h := range hs {
		var got []netip.Addr
		for _, ip := range h.IPs {
			got = append(got, ip.Addr)
		}
		if !slices.Equal(got, m.handles[h.ID]) {
			t.Fatalf("after %s: handle %s has %v, model %v", after, h.ID, got, m.handles[h.ID])
		}
	}
	blocks, err := r.a.Blocks(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != len(m.claimed) {
		t.Fatalf("after %s: %d blocks, model claimed %d", after, len(blocks), len(m.claimed))
	}
	for _, b := range blocks {
		if b.Node != m.claimed[b.CIDR] {
			t.Fatalf("after %s: block %s affine to %q, model %q", after, b.CIDR, b.Node, m.claimed[b.CIDR])
		}
	}
}
