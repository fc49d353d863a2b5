package consistency

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store/local"
)

// family is one IP family's test fixture.
type family struct {
	name string
	pool ipam.Pool
}

var families = []family{
	{"ipv4", ipam.Pool{Name: "p4", CIDR: netip.MustParsePrefix("10.9.0.0/24"), BlockSize: 28, Origin: "cli"}},
	{"ipv6", ipam.Pool{Name: "p6", CIDR: netip.MustParsePrefix("fd00:9::/120"), BlockSize: 124, Origin: "cli"}},
}

// fixture is a real local store holding one pool with allocations on two
// nodes: handles h-a0..h-a2 on node-a, h-b0 on node-b.
type fixture struct {
	t     *testing.T
	ctx   context.Context
	store kv.Store
	alloc *allocator.Allocator
	pool  ipam.Pool
	hs    map[string]ipam.Handle
}

func newFixture(t *testing.T, f family) *fixture {
	t.Helper()
	ctx := context.Background()
	st, err := local.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	fx := &fixture{t: t, ctx: ctx, store: st, alloc: allocator.New(st, nil), pool: f.pool, hs: map[string]ipam.Handle{}}
	fx.alloc.Now = func() time.Time { return time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC) }
	if err := fx.alloc.CreatePool(ctx, f.pool); err != nil {
		t.Fatal(err)
	}
	for _, n := range []struct{ id, node string }{{"net.a0.eth0", "node-a"}, {"net.a1.eth0", "node-a"}, {"net.a2.eth0", "node-a"}, {"net.b0.eth0", "node-b"}} {
		fx.allocate(n.id, n.node)
	}
	return fx
}

func (fx *fixture) allocate(id, node string) ipam.Handle {
	fx.t.Helper()
	h, err := fx.alloc.Allocate(fx.ctx, allocator.Request{
		Handle: ipam.Handle{ID: id, Node: node, Network: "net", IfName: "eth0"},
		Sets:   [][]string{{fx.pool.Name}},
	})
	if err != nil {
		fx.t.Fatalf("allocate %s: %v", id, err)
	}
	fx.hs[id] = h
	return h
}

// ip returns the address and block of a handle of the fixture.
func (fx *fixture) ip(id string) ipam.HandleIP { return fx.hs[id].IPs[0] }

func (fx *fixture) blockKey(id string) string {
	ip := fx.ip(id)
	return allocator.BlockKey(ip.Pool, ip.Block)
}

// put writes a raw value (a []byte as is, anything else as JSON).
func (fx *fixture) put(key string, v any) {
	fx.t.Helper()
	b, ok := v.([]byte)
	if !ok {
		var err error
		if b, err = json.Marshal(v); err != nil {
			fx.t.Fatal(err)
		}
	}
	if err := fx.store.Txn(fx.ctx, nil, []kv.Op{{Key: key, Value: b}}); err != nil {
		fx.t.Fatal(err)
	}
}

func (fx *fixture) del(key string) {
	fx.t.Helper()
	if err := fx.store.Txn(fx.ctx, nil, []kv.Op{{Key: key, Delete: true}}); err != nil {
		fx.t.Fatal(err)
	}
}

// edit decodes the value at key into a T, lets f change it and writes it.
func edit[T any](fx *fixture, key string, f func(*T)) {
	fx.t.Helper()
	es, err := fx.store.Get(fx.ctx, key)
	if err != nil || es[0].Version == 0 {
		fx.t.Fatalf("get %s: %v (version %d)", key, err, es[0].Version)
	}
	var v T
	if err := json.Unmarshal(es[0].Value, &v); err != nil {
		fx.t.Fatal(err)
	}
	f(&v)
	fx.put(key, v)
}

func (fx *fixture) check() Report {
	fx.t.Helper()
	r, err := Check(fx.ctx, fx.store)
	if err != nil {
		fx.t.Fatal(err)
	}
	return r
}

// dump returns every key and version, to see that nothing was written.
func (fx *fixture) dump() string {
	fx.t.Helper()
	es, err := fx.store.List(fx.ctx, "")
	if err != nil {
		fx.t.Fatal(err)
	}
	s := ""
	for _, e := range es {
		s += fmt.Sprintf("%s@%d\n", e.Key, e.Version)
	}
	return s
}

func ordOf(b ipam.Block, a netip.Addr) int {
	o, err := b.Ordinal(a)
	if err != nil {
		panic(err)
	}
	return o
}
