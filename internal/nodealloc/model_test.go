package nodealloc_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/nodealloc"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

var (
	pool4 = ipam.Pool{Name: "v4", CIDR: netip.MustParsePrefix("10.1.0.0/24"), BlockSize: 28, Gateway: netip.MustParseAddr("10.1.0.1")}
	pool6 = ipam.Pool{Name: "v6", CIDR: netip.MustParsePrefix("fd00:1::/120"), BlockSize: 124}
)

// model is the plain reference: which handle holds which address, each
// block's free queue in order, and the records' attributes.
type model struct {
	owner  map[netip.Addr]string
	queues map[store.BlockRef][]netip.Addr
	blocks []store.BlockRef // in the order they were added
	attrs  map[string]ipamHandle
}

func (m *model) firstFree(p ipam.Pool) (netip.Addr, bool) {
	var refs []store.BlockRef
	for _, r := range m.blocks {
		if r.Pool == p.Name {
			refs = append(refs, r)
		}
	}
	slices.SortFunc(refs, func(a, b store.BlockRef) int { return a.CIDR.Addr().Compare(b.CIDR.Addr()) })
	for _, r := range refs {
		for _, a := range m.queues[r] {
			if p.Permits(a) {
				return a, true
			}
		}
	}
	return netip.Addr{}, false
}

func (m *model) take(ref store.BlockRef, a netip.Addr, h string) {
	m.queues[ref] = slices.DeleteFunc(m.queues[ref], func(x netip.Addr) bool { return x == a })
	m.owner[a] = h
}

func (m *model) refOf(a netip.Addr) store.BlockRef {
	for _, r := range m.blocks {
		if r.CIDR.Contains(a) {
			return r
		}
	}
	panic(a)
}

func (m *model) release(h string) {
	var held []netip.Addr
	for a, o := range m.owner {
		if o == h {
			held = append(held, a)
		}
	}
	// The object frees in record order: the order the addresses were taken.
	slices.SortFunc(held, func(x, y netip.Addr) int {
		return slices.Index(m.attrs[h].IPsOrder, x) - slices.Index(m.attrs[h].IPsOrder, y)
	})
	for _, a := range held {
		delete(m.owner, a)
		r := m.refOf(a)
		m.queues[r] = append(m.queues[r], a)
	}
	delete(m.attrs, h)
}

// TestModel runs random operations on a dual-stack node object and on the
// model side by side; after every step the object must be valid, agree
// with the model address by address and queue by queue, and the object
// the step started from must be unchanged.
func TestModel(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runModel(t, seed) })
	}
}

func runModel(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	pools := []ipam.Pool{pool4, pool6}
	n := store.Node{Name: "node-a"}
	m := &model{owner: map[netip.Addr]string{}, queues: map[store.BlockRef][]netip.Addr{}, attrs: map[string]ipamHandle{}}
	next := 0
	pick := func() (string, bool) {
		if len(m.attrs) == 0 {
			return "", false
		}
		ids := slices.Sorted(func(yield func(string) bool) {
			for id := range m.attrs {
				if !yield(id) {
					return
				}
			}
		})
		return ids[rng.IntN(len(ids))], true
	}
	for step := range 400 {
		before := deepNode(n)
		p := pools[rng.IntN(2)]
		var after store.Node
		var err error
		if rng.IntN(8) == 0 {
			// Written: later edits are taken from the log against this.
			n = store.AsStored(n, store.Parts{Head: store.Version(fmt.Sprint(step + 1))})
			before = deepNode(n)
		}
		switch op := rng.IntN(11); {
		case op == 10: // a dual-stack handle: both addresses assigned, then recorded once
			h := newHandle(&next)
			var ips []ipam.HandleIP
			var order []netip.Addr
			after = n
			for _, dp := range pools {
				want, ok := m.firstFree(dp)
				var ip ipam.HandleIP
				after, ip, err = nodealloc.Assign(after, dp, h.ID)
				if !ok {
					if !errors.Is(err, nodealloc.ErrNoRoom) {
						t.Fatalf("step %d: Assign with no room = %v", step, err)
					}
					continue
				}
				if err != nil || ip.Addr != want {
					t.Fatalf("step %d: Assign = %v, %v; the model says %s", step, ip, err, want)
				}
				m.take(m.refOf(want), want, h.ID)
				ips, order = append(ips, ip), append(order, want)
			}
			err = nil
			after = nodealloc.Record(after, h, ips)
			if len(ips) > 0 {
				m.attrs[h.ID] = ipamHandle{Handle: h, IPsOrder: order}
			}
		case op == 0: // claim another block
			i := uint64(rng.IntN(int(p.NumBlocks())))
			ref := store.BlockRef{Pool: p.Name, CIDR: p.BlockAt(i)}
			after = nodealloc.AddBlock(n, p, ref.CIDR)
			if !slices.Contains(m.blocks, ref) {
				m.blocks = append(m.blocks, ref)
				for o := range ipam.NewBlock(p, ref.CIDR, n.Name).Size() {
					m.queues[ref] = append(m.queues[ref], ipam.NewBlock(p, ref.CIDR, n.Name).Addr(o))
				}
			}
		case op <= 4: // allocate any address
			h := newHandle(&next)
			var ip ipam.HandleIP
			after, ip, err = nodealloc.Take(n, p, h)
			want, ok := m.firstFree(p)
			switch {
			case !ok:
				if !errors.Is(err, nodealloc.ErrNoRoom) {
					t.Fatalf("step %d: Take with no room = %v", step, err)
				}
			case err != nil || ip.Addr != want:
				t.Fatalf("step %d: Take = %v, %v; the model says %s", step, ip, err, want)
			default:
				m.take(m.refOf(want), want, h.ID)
				m.attrs[h.ID] = ipamHandle{Handle: h, IPsOrder: []netip.Addr{want}}
			}
		case op == 5: // a specific address
			if len(m.blocks) == 0 {
				continue
			}
			ref := m.blocks[rng.IntN(len(m.blocks))]
			bp := pools[0]
			if ref.Pool == pool6.Name {
				bp = pool6
			}
			b := ipam.NewBlock(bp, ref.CIDR, n.Name)
			a := b.Addr(rng.IntN(b.Size()))
			h := newHandle(&next)
			after, _, err = nodealloc.TakeAddr(n, bp, a, h)
			_, held := m.owner[a]
			if held || !bp.Permits(a) {
				if !errors.Is(err, nodealloc.ErrTaken) {
					t.Fatalf("step %d: TakeAddr(%s) of a held or reserved address = %v", step, a, err)
				}
			} else if err != nil {
				t.Fatalf("step %d: TakeAddr(%s) = %v", step, a, err)
			} else {
				m.take(ref, a, h.ID)
				m.attrs[h.ID] = ipamHandle{Handle: h, IPsOrder: []netip.Addr{a}}
			}
		case op <= 7: // release
			id, ok := pick()
			if !ok {
				continue
			}
			if rec, _ := n.Handle(id); len(rec.IPs) == 1 && rng.IntN(2) == 0 {
				after, err = nodealloc.ReleaseAddr(n, id, rec.IPs[0].Addr)
			} else {
				after, _ = nodealloc.Release(n, id)
			}
			m.release(id)
		case op == 8: // guarded release, half of the time on a stale observation
			id, ok := pick()
			if !ok {
				continue
			}
			obs, _ := n.Handle(id)
			stale := rng.IntN(2) == 0
			if stale {
				obs.Created = obs.Created.Add(time.Second)
			}
			after, _, err = nodealloc.ReleaseObserved(n, obs)
			if stale != errors.Is(err, nodealloc.ErrChanged) {
				t.Fatalf("step %d: ReleaseObserved (stale %v) = %v", step, stale, err)
			}
			if !stale {
				m.release(id)
			}
		default: // takeover by a new sandbox
			id, ok := pick()
			if !ok {
				continue
			}
			obs, _ := n.Handle(id)
			h := newHandle(&next)
			after, err = nodealloc.Rename(n, obs, h)
			if err != nil {
				t.Fatalf("step %d: Rename: %v", step, err)
			}
			a := m.attrs[id]
			for addr, o := range m.owner {
				if o == id {
					m.owner[addr] = h.ID
				}
			}
			delete(m.attrs, id)
			m.attrs[h.ID] = ipamHandle{Handle: h, IPsOrder: a.IPsOrder}
		}
		if err != nil && after.Name == "" {
			after = n
		}
		if !reflect.DeepEqual(deepNode(n), before) {
			t.Fatalf("step %d changed the object it was given", step)
		}
		n = after
		check(t, step, n, m)
		checkChanges(t, step, n)
	}
}

// checkChanges holds that what Changes takes from the edits' log is what
// comparing the whole object finds.
func checkChanges(t *testing.T, step int, n store.Node) {
	t.Helper()
	got, err := store.Changes(n)
	if err != nil {
		t.Fatalf("step %d: Changes: %v", step, err)
	}
	want, err := store.FullChanges(n)
	if err != nil {
		t.Fatalf("step %d: FullChanges: %v", step, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("step %d: Changes from the log\n got  %+v\n want %+v", step, got, want)
	}
}

type ipamHandle struct {
	ipam.Handle
	IPsOrder []netip.Addr
}

func newHandle(next *int) ipam.Handle {
	*next++
	c := fmt.Sprintf("c%d", *next)
	return ipam.Handle{ID: ipam.HandleID("net", c, "eth0"), Network: "net", ContainerID: c, IfName: "eth0", Node: "node-a", PodUID: "uid-" + c, Created: time.Unix(int64(*next), 0).UTC()}
}

func check(t *testing.T, step int, n store.Node, m *model) {
	t.Helper()
	if err := n.Validate(); err != nil {
		t.Fatalf("step %d: %v", step, err)
	}
	got := map[netip.Addr]string{}
	for _, h := range n.Handles {
		if _, ok := m.attrs[h.ID]; !ok {
			t.Fatalf("step %d: record %q the model does not have", step, h.ID)
		}
		for _, ip := range h.IPs {
			got[ip.Addr] = h.ID
		}
	}
	if !reflect.DeepEqual(got, m.owner) {
		t.Fatalf("step %d: owners\n got  %v\n want %v", step, got, m.owner)
	}
	if len(n.Handles) != len(m.attrs) {
		t.Fatalf("step %d: %d records, the model has %d", step, len(n.Handles), len(m.attrs))
	}
	for _, ref := range m.blocks {
		b, ok := n.Block(ref)
		if !ok {
			t.Fatalf("step %d: block %s missing", step, ref)
		}
		var q []netip.Addr
		for _, o := range b.Free {
			q = append(q, b.Addr(o))
		}
		if !slices.Equal(q, m.queues[ref]) {
			t.Fatalf("step %d: block %s queue\n got  %v\n want %v", step, ref, q, m.queues[ref])
		}
	}
}

// deepNode copies n down to its blocks' queues and owners and its
// records' addresses, so that a change made in place to any of them shows.
func deepNode(n store.Node) store.Node {
	c := n
	c.Blocks, c.Handles, c.Loans = deepCopy(n.Blocks), deepCopyHandles(n.Handles), slices.Clone(n.Loans)
	return c
}
