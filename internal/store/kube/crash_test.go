package kube

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/consistency"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/storetest"
)

var errKilled = errors.New("process killed (test)")

// killTransport sends a store's requests until it has sent `after`
// writes (POST, PUT, DELETE); every later write fails without being sent,
// as if the process had been killed right after its after-th write.
// Reads still pass (a lost answer's read-back finds nothing). after < 0:
// nothing is killed.
type killTransport struct {
	next   http.RoundTripper
	after  atomic.Int64
	writes atomic.Int64
}

func (k *killTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet {
		if a := k.after.Load(); a >= 0 && k.writes.Add(1) > a {
			return nil, errKilled
		}
	}
	return k.next.RoundTrip(req)
}

// kill arms the transport: the next after writes pass, the rest fail.
func (k *killTransport) kill(after int64) {
	k.writes.Store(0)
	k.after.Store(after)
}

// openKillable opens a store in a fresh partition as the cluster admin,
// with its transport.
func openKillable(t *testing.T) (*Store, *killTransport) {
	t.Helper()
	s := kubetest.Require(t, srv)
	kt := &killTransport{}
	kt.after.Store(-1)
	cfg := rest.CopyConfig(s.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { kt.next = rt; return kt }
	st, err := NewForConfig(cfg, "k"+strconv.FormatInt(partitions.Add(1), 10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, kt
}

var (
	crash4     = ipam.Pool{Name: "v4", CIDR: netip.MustParsePrefix("10.9.0.0/24"), BlockSize: 28}
	crash6     = ipam.Pool{Name: "v6", CIDR: netip.MustParsePrefix("fd00:9::/120"), BlockSize: 124}
	crashSmall = ipam.Pool{Name: "small", CIDR: netip.MustParsePrefix("10.8.0.0/27"), BlockSize: 28}
)

func crashRequest(node, container string, pools ...string) allocator.Request {
	r := allocator.Request{Handle: ipam.Handle{
		ID: ipam.HandleID("net", container, "eth0"), Network: "net", ContainerID: container, IfName: "eth0",
		Node: node, Namespace: "default", Pod: "pod-" + container, PodUID: "uid-" + container,
	}}
	for _, p := range pools {
		r.Sets = append(r.Sets, []string{p})
	}
	return r
}

// TestCrashPoints: an operation of the allocator on this backend, whose
// node writes are several requests, killed after each of its writes in
// turn (every PUT of an UpdateNode among them): no address has two
// holders (storetest.Holders, and `ipkeeperctl check` finds no duplicate);
// what remains belongs to the handle being written: the ADD's retry
// returns it whole (a half the kill left, one family's block written, is
// released and allocated again), the runtime's DEL leaves nothing of it
// and an ADD again succeeds whole (DEL again, for a killed DEL); then
// check finds nothing.
func TestCrashPoints(t *testing.T) {
	x := crashRequest("node-c", "x", "v4", "v6")
	add := func(r allocator.Request) func(context.Context, *allocator.Allocator) error {
		return func(ctx context.Context, a *allocator.Allocator) error {
			_, err := a.Allocate(ctx, r)
			return err
		}
	}
	del := func(ctx context.Context, a *allocator.Allocator) error {
		_, err := a.Release(ctx, x.Handle.Node, x.Handle.ID)
		return err
	}
	mustAdd := func(t *testing.T, a *allocator.Allocator, r allocator.Request) {
		t.Helper()
		if _, err := a.Allocate(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	scenarios := []struct {
		name  string
		setup func(t *testing.T, a *allocator.Allocator)
		op    func(context.Context, *allocator.Allocator) error
		isDel bool
		req   allocator.Request
	}{
		{"dual-stack ADD in the node's blocks", func(t *testing.T, a *allocator.Allocator) {
			mustAdd(t, a, crashRequest("node-c", "first", "v4", "v6"))
		}, add(x), false, x},
		{"first dual-stack ADD of a node", nil, add(x), false, x},
		{"dual-stack ADD borrowing its IPv4 address", func(t *testing.T, a *allocator.Allocator) {
			mustAdd(t, a, crashRequest("node-a", "a", "small"))
			mustAdd(t, a, crashRequest("node-b", "b", "small"))
		}, add(crashRequest("node-c", "x", "small", "v6")), false, crashRequest("node-c", "x", "small", "v6")},
		{"DEL of a dual-stack handle", func(t *testing.T, a *allocator.Allocator) {
			mustAdd(t, a, crashRequest("node-c", "first", "v4", "v6"))
			mustAdd(t, a, x)
		}, del, true, x},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			for after := int64(0); ; after++ {
				if after > 12 {
					t.Fatal("the operation kept writing past 12 writes")
				}
				// After an ADD killed, the runtime retries it, or
				// gives up and deletes it: both, each on a store of its
				// own.
				done := crashAt(t, after, sc.setup, sc.op, sc.isDel, false, sc.req)
				if !done && !sc.isDel {
					crashAt(t, after, sc.setup, sc.op, sc.isDel, true, sc.req)
				}
				if done {
					if after == 0 {
						t.Fatal("an operation that writes nothing")
					}
					t.Logf("%d crash points", after)
					return
				}
			}
		})
	}
}

// crashAt runs op on a fresh partition, killed after its after-th write,
// and checks what it left; it reports whether op completed.
func crashAt(t *testing.T, after int64, setup func(*testing.T, *allocator.Allocator), op func(context.Context, *allocator.Allocator) error, isDel, retry bool, req allocator.Request) bool {
	t.Helper()
	ctx := ctxT(t)
	st, kt := openKillable(t)
	a := allocator.New(st, nil)
	for _, p := range []ipam.Pool{crash4, crash6, crashSmall} {
		if _, err := a.EnsurePool(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if setup != nil {
		setup(t, a)
	}
	before := storetest.Holders(t, st)
	kt.kill(after)
	err := op(ctx, allocator.New(st, nil))
	kt.kill(-1)
	if err == nil {
		return true
	}
	if !errors.Is(err, errKilled) {
		t.Fatalf("killed after write %d: %v", after, err)
	}
	storetest.Holders(t, st) // no address held twice
	noDuplicate(t, st, fmt.Sprintf("killed after write %d", after))
	fresh := allocator.New(st, nil)
	if retry {
		h, err := fresh.Allocate(ctx, req)
		if err != nil || len(h.IPs) != len(req.Sets) {
			t.Fatalf("killed after write %d: the ADD's retry = %+v, %v; want %d addresses", after, h, err, len(req.Sets))
		}
		if got := storetest.Holders(t, st); len(got) != len(before)+len(h.IPs) {
			t.Fatalf("killed after write %d: the ADD's retry holds %d addresses, want %d", after, len(got), len(before)+len(h.IPs))
		}
	}
	if _, err := fresh.Release(ctx, req.Handle.Node, req.Handle.ID); err != nil {
		t.Fatalf("killed after write %d: the DEL: %v", after, err)
	}
	want := len(before)
	if isDel {
		want -= len(req.Sets)
	}
	if left := storetest.Holders(t, st); len(left) != want {
		t.Fatalf("killed after write %d: after the DEL %d addresses are held, want %d", after, len(left), want)
	}
	if !isDel {
		h, err := fresh.Allocate(ctx, req)
		if err != nil || len(h.IPs) != len(req.Sets) {
			t.Fatalf("killed after write %d: ADD again = %+v, %v", after, h, err)
		}
		if got := storetest.Holders(t, st); len(got) != len(before)+len(h.IPs) {
			t.Fatalf("killed after write %d: ADD again holds %d addresses, want %d", after, len(got), len(before)+len(h.IPs))
		}
	}
	rep, err := consistency.CheckStore(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) > 0 {
		t.Fatalf("killed after write %d, then DEL (and ADD) again: check finds %+v", after, rep.Problems)
	}
	return false
}

// noDuplicate fails when `ipkeeperctl check` finds an address held twice.
func noDuplicate(t *testing.T, s store.Store, what string) {
	t.Helper()
	rep, err := consistency.CheckStore(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Problems {
		if p.Kind == consistency.KindDuplicate {
			t.Fatalf("%s: check finds %+v", what, p)
		}
	}
}
