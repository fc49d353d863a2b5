package importer_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/importer"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

const calicoNode = "ip-10-200-205-203"

// borrowedPlan is the Calico plan with one pod on another node (Calico
// borrowing across nodes): its address is in the block of calicoNode. The
// borrower sorts after the lender, so that only the loans pass writes its
// loan before the lender's record.
func borrowedPlan(t *testing.T) (*importer.Plan, string) {
	plan := calicoPlan(t)
	const id = "k8s-pod-network.2caf1c8381761431c694771227eec339c5c0bb0ed3f11a6f2067883d5f405b69.eth0"
	for i := range plan.Handles {
		if plan.Handles[i].ID == id {
			plan.Handles[i].Node = "worker-9"
		}
	}
	return plan, id
}

// TestApplyStoreBorrowed: a handle whose address is in another node's
// block is imported as a record in the lender's object and a loan in its
// own node's object (created: that node holds no block); the allocator
// finds it whole from its node and DEL frees it.
func TestApplyStoreBorrowed(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		plan, id := borrowedPlan(t)
		if _, err := e.apply(ctx, plan, false); err != nil {
			t.Fatal(err)
		}
		e.check(t)
		own, err := e.typed.GetNode(ctx, "worker-9")
		if err != nil || len(own.Blocks) != 0 || len(own.LendersOf(id)) != 1 || own.LendersOf(id)[0] != calicoNode {
			t.Fatalf("borrower's object: %+v, %v; want a loan of %s from %s", own, err, id, calicoNode)
		}
		a := allocator.New(e.typed, nil)
		h, ok, err := a.Handle(ctx, "worker-9", id)
		if err != nil || !ok || len(h.IPs) != 1 || h.IPs[0].Addr != netip.MustParseAddr("100.112.209.161") {
			t.Fatalf("Handle(borrower, %s) = %+v, %v, %v", id, h, ok, err)
		}
		res, err := e.apply(ctx, plan, false)
		if got := statuses(res); err != nil || got["handle present"] != 9 || got["block present"] != 1 {
			t.Fatalf("second run: %v, %v", got, err)
		}
		freed, err := a.Release(ctx, "worker-9", id)
		if err != nil || len(freed) != 1 || freed[0] != netip.MustParseAddr("100.112.209.161") {
			t.Fatalf("release: %v, %v", freed, err)
		}
		nodes, err := e.typed.ListNodes(ctx, store.NodeSelector{})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			if _, held := n.Handle(id); held || len(n.LendersOf(id)) > 0 {
				t.Errorf("after DEL, %s's object still holds %s", n.Name, id)
			}
		}
		e.check(t)
	})
}

// TestApplyStoreClaimedElsewhere: a block another node claimed fails the
// import, writing nothing.
func TestApplyStoreClaimedElsewhere(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		plan := calicoPlan(t)
		if _, err := e.typed.CreateClaim(ctx, store.Claim{BlockRef: store.BlockRef{Pool: plan.Blocks[0].Pool, CIDR: plan.Blocks[0].CIDR}, Node: "elsewhere"}); err != nil {
			t.Fatal(err)
		}
		before := e.dump(t)
		_, err := e.apply(ctx, plan, false)
		if !errors.Is(err, importer.ErrConflict) || !strings.Contains(err.Error(), `claimed by node "elsewhere"`) {
			t.Fatalf("err = %v, want ErrConflict naming the other node", err)
		}
		if e.dump(t) != before {
			t.Fatal("a refused import wrote")
		}
	})
}

// TestApplyStoreBadInput: a plan that cannot be stored is refused with
// ErrInvalidSource naming the offender, writing nothing.
func TestApplyStoreBadInput(t *testing.T) {
	for _, c := range []struct {
		name    string
		spoil   func(p *importer.Plan)
		mention string
	}{
		{"handle of a node with '/'", func(p *importer.Plan) { p.Handles[0].Node = "a/b" }, `"a/b"`},
		{"block of a node with '/'", func(p *importer.Plan) { p.Blocks[0].Node = "c/d" }, `"c/d"`},
		{"address no block gives", func(p *importer.Plan) { p.Handles[0].IPs[0].Addr = p.Handles[0].IPs[0].Addr.Next() }, "calico-import.unknown.100.112.209.128"},
	} {
		t.Run(c.name, func(t *testing.T) {
			eachEnv(t, func(t *testing.T, e *env) {
				plan := calicoPlan(t)
				c.spoil(plan)
				before := e.dump(t)
				_, err := e.apply(context.Background(), plan, false)
				if !errors.Is(err, importer.ErrInvalidSource) || !strings.Contains(err.Error(), c.mention) {
					t.Fatalf("err = %v, want ErrInvalidSource naming %s", err, c.mention)
				}
				if e.dump(t) != before {
					t.Fatal("bad input changed the store")
				}
			})
		})
	}
}

// cutStore fails every write after the first n, as if the importing
// process died there.
type cutStore struct {
	store.Store
	n int
}

var errStoreCut = errors.New("cut")

func (c *cutStore) cut() error {
	if c.n == 0 {
		return errStoreCut
	}
	c.n--
	return nil
}

func (c *cutStore) CreatePool(ctx context.Context, p store.Pool) (store.Pool, error) {
	if err := c.cut(); err != nil {
		return store.Pool{}, err
	}
	return c.Store.CreatePool(ctx, p)
}

func (c *cutStore) CreateClaim(ctx context.Context, cl store.Claim) (store.Claim, error) {
	if err := c.cut(); err != nil {
		return store.Claim{}, err
	}
	return c.Store.CreateClaim(ctx, cl)
}

func (c *cutStore) CreateNode(ctx context.Context, n store.Node) (store.Node, error) {
	if err := c.cut(); err != nil {
		return store.Node{}, err
	}
	return c.Store.CreateNode(ctx, n)
}

func (c *cutStore) UpdateNode(ctx context.Context, n store.Node) (store.Node, error) {
	if err := c.cut(); err != nil {
		return store.Node{}, err
	}
	return c.Store.UpdateNode(ctx, n)
}

// TestApplyStoreResumes cuts the import (the borrowed plan: a pool, a
// loan, a claim, the lender's object) before each of its writes: what is
// left holds no address twice, every record and loan names a handle of the
// plan with its addresses, and a rerun completes the import.
func TestApplyStoreResumes(t *testing.T) {
	for _, e := range envs {
		if !strings.HasPrefix(e.name, "store-") {
			continue
		}
		t.Run(e.name, func(t *testing.T) {
			for cut := 0; ; cut++ {
				if cut > 10 { // the plan needs 4 writes
					t.Fatal("the import never completed")
				}
				env := e.open(t)
				ctx := context.Background()
				plan, _ := borrowedPlan(t)
				_, err := importer.ApplyStore(ctx, &cutStore{Store: env.typed, n: cut}, plan, false)
				if err == nil {
					if cut < 4 {
						t.Fatalf("the import completed in %d writes, want 4", cut)
					}
					env.check(t)
					break
				}
				if !errors.Is(err, errStoreCut) {
					t.Fatalf("cut after %d writes: %v", cut, err)
				}
				checkPartial(t, env.typed, plan)
				res, err := env.apply(ctx, plan, false)
				if err != nil {
					t.Fatalf("rerun after a cut after %d writes: %v", cut, err)
				}
				if got := statuses(res); got["handle created"] != 9 {
					t.Fatalf("rerun after a cut after %d writes: %v", cut, got)
				}
				env.check(t)
				if res, err := env.apply(ctx, plan, false); err != nil || statuses(res)["handle present"] != 9 {
					t.Fatalf("third run: %v, %v", statuses(res), err)
				}
			}
		})
	}
}

// checkPartial fails unless every record and loan in s names a handle of
// plan, records hold only the plan's addresses of their handle, no
// address is held twice, and every record in another node's object is
// known to that node by a loan (loans are written before records).
func checkPartial(t *testing.T, s store.Store, plan *importer.Plan) {
	t.Helper()
	nodes, err := s.ListNodes(context.Background(), store.NodeSelector{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]ipam.Handle{}
	for _, h := range plan.Handles {
		want[h.ID] = h
	}
	held := map[netip.Addr]string{}
	for _, n := range nodes {
		for _, r := range n.Handles {
			h, ok := want[r.ID]
			if !ok {
				t.Fatalf("record of %s, not a handle of the plan", r.ID)
			}
			for _, ip := range r.IPs {
				if h.IPs[0].Addr != ip.Addr {
					t.Fatalf("record of %s holds %s, the plan %v", r.ID, ip.Addr, h.IPs)
				}
				if other, dup := held[ip.Addr]; dup {
					t.Fatalf("%s held by %s and %s", ip.Addr, other, r.ID)
				}
				held[ip.Addr] = r.ID
			}
		}
		for _, l := range n.Loans {
			if _, ok := want[l.Handle]; !ok {
				t.Fatalf("loan of %s, not a handle of the plan", l.Handle)
			}
		}
	}
	objects := map[string]store.Node{}
	for _, n := range nodes {
		objects[n.Name] = n
	}
	for _, n := range nodes {
		for _, r := range n.Handles {
			if r.Node != n.Name && !slices.Contains(objects[r.Node].LendersOf(r.ID), n.Name) {
				t.Fatalf("record of %s in %s's object, and no loan in %s's: DEL on %s would not find it", r.ID, n.Name, r.Node, r.Node)
			}
		}
	}
}

// hookStore runs before once, before the first node object write the
// import makes of the object named node.
type hookStore struct {
	store.Store
	node   string
	once   sync.Once
	before func()
}

func (h *hookStore) CreateNode(ctx context.Context, n store.Node) (store.Node, error) {
	if n.Name == h.node {
		h.once.Do(h.before)
	}
	return h.Store.CreateNode(ctx, n)
}

func (h *hookStore) UpdateNode(ctx context.Context, n store.Node) (store.Node, error) {
	if n.Name == h.node {
		h.once.Do(h.before)
	}
	return h.Store.UpdateNode(ctx, n)
}

// TestApplyStoreMergesConcurrentAllocation: a pod allocated on the node
// between the import's read and its write of the node's object (in a pool
// of its own) makes the import's write fail; the import reads the object
// again and merges: both the pod's and every imported address are held.
func TestApplyStoreMergesConcurrentAllocation(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		a := allocator.New(e.typed, nil)
		if _, err := a.EnsurePool(ctx, otherPool); err != nil {
			t.Fatal(err)
		}
		var pod ipam.Handle
		hs := &hookStore{Store: e.typed, node: calicoNode, before: func() {
			var err error
			if pod, err = a.Allocate(ctx, allocator.Request{Handle: ipam.Handle{ID: "net.pod.eth0", Node: calicoNode}, Sets: [][]string{{otherPool.Name}}}); err != nil {
				t.Error(err)
			}
		}}
		plan := calicoPlan(t)
		if _, err := importer.ApplyStore(ctx, hs, plan, false); err != nil {
			t.Fatal(err)
		}
		e.check(t)
		n, err := e.typed.GetNode(ctx, calicoNode)
		if err != nil {
			t.Fatal(err)
		}
		if r, ok := n.Handle("net.pod.eth0"); !ok || len(pod.IPs) != 1 || r.IPs[0].Addr != pod.IPs[0].Addr {
			t.Fatalf("the pod allocated during the import: record %+v, %v; allocated %+v", r, ok, pod)
		}
		for _, h := range plan.Handles {
			if r, ok := n.Handle(h.ID); !ok || r.IPs[0].Addr != h.IPs[0].Addr {
				t.Errorf("imported %s: record %+v, %v", h.ID, r, ok)
			}
		}
	})
}

// TestApplyStoreHandleElsewhere: a handle the store holds with other
// addresses in an object the import does not write to (the borrower's
// own) fails the import, writing nothing.
func TestApplyStoreHandleElsewhere(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		plan, id := borrowedPlan(t)
		e.otherHandle(t, "worker-9", id)
		before := e.dump(t)
		_, err := e.apply(context.Background(), plan, false)
		if !errors.Is(err, importer.ErrConflict) || !strings.Contains(err.Error(), "handle "+id+" exists with addresses 10.99.0.") {
			t.Fatalf("err = %v, want ErrConflict naming %s's stored addresses", err, id)
		}
		if e.dump(t) != before {
			t.Fatal("a refused import wrote")
		}
	})
}

// limitStore is a store with other limits.
type limitStore struct {
	store.Store
	lim store.Limits
}

func (l limitStore) Limits() store.Limits { return l.lim }

// TestApplyStoreTooLarge: a node object the store cannot take — over the
// size of one object, or a block that does not fit one write — fails the
// import before anything is written.
func TestApplyStoreTooLarge(t *testing.T) {
	for _, lim := range []store.Limits{{MaxNodeBytes: 512}, {MaxWriteParts: 1}} {
		t.Run(fmt.Sprintf("%+v", lim), func(t *testing.T) {
			eachEnv(t, func(t *testing.T, e *env) {
				before := e.dump(t)
				_, err := importer.ApplyStore(context.Background(), limitStore{e.typed, lim}, calicoPlan(t), false)
				if !errors.Is(err, store.ErrTooLarge) || !strings.Contains(err.Error(), calicoNode) {
					t.Fatalf("err = %v, want ErrTooLarge naming %s", err, calicoNode)
				}
				if e.dump(t) != before {
					t.Fatal("a refused import wrote")
				}
			})
		})
	}
}
