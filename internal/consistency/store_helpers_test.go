package consistency

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/nodealloc"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked/kvbackedtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	kvbackedtest.Stop()
	os.Exit(code)
}

// typedBackends runs fn on a fresh typed store of each real backend.
func typedBackends(t *testing.T, fn func(t *testing.T, s *kvbacked.Store)) {
	kvbackedtest.Backends(t, fn)
}

// The pools of the typed tests: one block of each is pool-sized so that
// a second node has to borrow.
var (
	tp4 = ipam.Pool{Name: "p4", CIDR: netip.MustParsePrefix("10.9.0.0/27"), BlockSize: 28, Origin: "cli"}
	tp6 = ipam.Pool{Name: "p6", CIDR: netip.MustParsePrefix("fd00:9::/123"), BlockSize: 124, Origin: "cli"}
)

// typedFamilies are the IPv4 and IPv6 sides of every table.
var typedFamilies = []struct {
	name string
	pool ipam.Pool
}{{"ipv4", tp4}, {"ipv6", tp6}}

func createPools(t *testing.T, s store.Store, pools ...ipam.Pool) {
	t.Helper()
	for _, p := range pools {
		if _, err := s.CreatePool(t.Context(), store.Pool{Spec: p}); err != nil {
			t.Fatal(err)
		}
	}
}

func handle(node, container string) ipam.Handle {
	return ipam.Handle{ID: ipam.HandleID("net", container, "eth0"), Network: "net", ContainerID: container, IfName: "eth0",
		Node: node, Namespace: "default", Pod: "pod-" + container, PodUID: "uid-" + container}
}

// blockAt returns block i of pool p.
func blockAt(p ipam.Pool, i uint64) store.BlockRef {
	first, _ := p.BlockSpan()
	return store.BlockRef{Pool: p.Name, CIDR: p.BlockAt(first + i)}
}

// holding returns node object n with block ref added (when missing) and,
// for each handle given, an address of that block taken for it.
func holding(t *testing.T, n store.Node, p ipam.Pool, ref store.BlockRef, hs ...ipam.Handle) store.Node {
	t.Helper()
	n = nodealloc.AddBlock(n, p, ref.CIDR)
	one := n
	one.Blocks = nil
	if b, ok := n.Block(ref); ok {
		one.Blocks = []ipam.Block{b}
	}
	for _, h := range hs {
		var err error
		var ip ipam.HandleIP
		if one, ip, err = nodealloc.Take(one, p, h); err != nil {
			t.Fatal(err)
		}
		n = replaceBlock(n, one, ref)
		n = withRecord(n, h, ip)
	}
	return n
}

func replaceBlock(n, from store.Node, ref store.BlockRef) store.Node {
	b, _ := from.Block(ref)
	c := nodealloc.Clone(n)
	for i := range c.Blocks {
		if c.Blocks[i].Pool == ref.Pool && c.Blocks[i].CIDR == ref.CIDR {
			c.Blocks[i] = b
		}
	}
	return c
}

func withRecord(n store.Node, h ipam.Handle, ip ipam.HandleIP) store.Node {
	for i := range n.Handles {
		if n.Handles[i].ID == h.ID {
			n.Handles[i].IPs = append(n.Handles[i].IPs, ip)
			return n
		}
	}
	h.IPs = []ipam.HandleIP{ip}
	n.Handles = append(n.Handles, h)
	return n
}

func mustCreateNode(t *testing.T, s store.Store, n store.Node) store.Node {
	t.Helper()
	out, err := s.CreateNode(t.Context(), n)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mustClaim(t *testing.T, s store.Store, ref store.BlockRef, node string) {
	t.Helper()
	if _, err := s.CreateClaim(t.Context(), store.Claim{BlockRef: ref, Node: node}); err != nil {
		t.Fatal(err)
	}
}

// kinds lists the kinds of problems, with "!" after those not repairable.
func kinds(ps []Problem) []string {
	out := []string{}
	for _, p := range ps {
		k := string(p.Kind)
		if !p.Repairable {
			k += "!"
		}
		out = append(out, k)
	}
	return out
}

func mustCheck(t *testing.T, s store.Store) Report {
	t.Helper()
	r, err := CheckStore(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func wantKinds(t *testing.T, what string, ps []Problem, want ...string) {
	t.Helper()
	got := kinds(ps)
	w := slices.Clone(want)
	slices.Sort(w)
	g := slices.Clone(got)
	slices.Sort(g)
	if !slices.Equal(g, w) {
		t.Fatalf("%s: problems %v, want %v:\n%s", what, got, want, describe(ps))
	}
}

func describe(ps []Problem) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "  %s %s %s %s %s: %s\n", p.Kind, p.Key, p.Block, p.Addr, p.Handle, p.Detail)
	}
	return b.String()
}

// held maps every address held by a record to "node/handle" strings.
func held(t *testing.T, s store.Store) map[string][]string {
	t.Helper()
	ns, err := s.ListNodes(t.Context(), store.NodeSelector{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, n := range ns {
		for _, h := range n.Handles {
			for _, ip := range h.IPs {
				k := ip.Pool + "/" + ip.Addr.String()
				out[k] = append(out[k], n.Name+"/"+h.ID)
			}
		}
	}
	return out
}

// crashing is a real store whose process "dies" after a number of writes:
// every write after the first `after` fails, as if nothing after the crash
// reached the store. A pause hook may hold a write before it is sent.
type crashing struct {
	store.Store
	after  atomic.Int64 // writes left; negative: never crash
	writes atomic.Int64
	// before, when set, runs before each write is sent.
	before func(op, name string)
}

var errCrashed = fmt.Errorf("%w: test: the process crashed", store.ErrUnavailable)

func (c *crashing) write(op, name string) error {
	if c.before != nil {
		c.before(op, name)
	}
	if c.after.Load() == 0 {
		return errCrashed
	}
	c.after.Add(-1)
	c.writes.Add(1)
	return nil
}

func newCrashing(s store.Store, after int64) *crashing {
	c := &crashing{Store: s}
	c.after.Store(after)
	return c
}

func (c *crashing) CreatePool(ctx context.Context, p store.Pool) (store.Pool, error) {
	if err := c.write("CreatePool", p.Spec.Name); err != nil {
		return store.Pool{}, err
	}
	return c.Store.CreatePool(ctx, p)
}

func (c *crashing) UpdatePool(ctx context.Context, p store.Pool) (store.Pool, error) {
	if err := c.write("UpdatePool", p.Spec.Name); err != nil {
		return store.Pool{}, err
	}
	return c.Store.UpdatePool(ctx, p)
}

func (c *crashing) DeletePool(ctx context.Context, p store.Pool) error {
	if err := c.write("DeletePool", p.Spec.Name); err != nil {
		return err
	}
	return c.Store.DeletePool(ctx, p)
}

func (c *crashing) CreateClaim(ctx context.Context, cl store.Claim) (store.Claim, error) {
	if err := c.write("CreateClaim", cl.Node); err != nil {
		return store.Claim{}, err
	}
	return c.Store.CreateClaim(ctx, cl)
}

func (c *crashing) DeleteClaim(ctx context.Context, cl store.Claim) error {
	if err := c.write("DeleteClaim", cl.Node); err != nil {
		return err
	}
	return c.Store.DeleteClaim(ctx, cl)
}

func (c *crashing) CreateNode(ctx context.Context, n store.Node) (store.Node, error) {
	if err := c.write("CreateNode", n.Name); err != nil {
		return store.Node{}, err
	}
	return c.Store.CreateNode(ctx, n)
}

func (c *crashing) UpdateNode(ctx context.Context, n store.Node) (store.Node, error) {
	if err := c.write("UpdateNode", n.Name); err != nil {
		return store.Node{}, err
	}
	return c.Store.UpdateNode(ctx, n)
}

func (c *crashing) DeleteNode(ctx context.Context, n store.Node) error {
	if err := c.write("DeleteNode", n.Name); err != nil {
		return err
	}
	return c.Store.DeleteNode(ctx, n)
}

// dualReq asks for one address of each pool for handle h.
func dualReq(h ipam.Handle, pools ...ipam.Pool) allocator.Request {
	r := allocator.Request{Handle: h}
	for _, p := range pools {
		r.Sets = append(r.Sets, []string{p.Name})
	}
	return r
}

func newAlloc(s store.Store) *allocator.Allocator {
	a := allocator.New(s, nil)
	a.BaseBackoff, a.MaxBackoff = 0, 0
	return a
}

// putRaw writes a value under a key of the kv layout below the typed store:
// only to make an object that cannot be decoded.
func putRaw(t *testing.T, s *kvbacked.Store, key, value string) {
	t.Helper()
	if err := s.KV().Txn(t.Context(), nil, []kv.Op{{Key: key, Value: []byte(value)}}); err != nil {
		t.Fatal(err)
	}
}

// isErr reports whether err is one of the given sentinels.
func isErr(err error, targets ...error) bool {
	return slices.ContainsFunc(targets, func(e error) bool { return errors.Is(err, e) })
}
