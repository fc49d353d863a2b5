package allocator_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
)

// takeoverBackend opens a fresh, empty datastore of one backend.
type takeoverBackend struct {
	name string
	open func(t *testing.T) kv.Store
}

// takeoverBackends are a real bbolt file and an embedded etcd (one server
// for the calling test, a key prefix per subtest).
func takeoverBackends(t *testing.T) []takeoverBackend {
	srv := etcdtest.ForTest(t, nil)
	return []takeoverBackend{
		{"local", func(t *testing.T) kv.Store { return openStore(t) }},
		{"etcd", func(t *testing.T) kv.Store {
			st, err := etcd.Open(context.Background(), etcd.Config{Endpoints: []string{srv.Endpoint}, Prefix: "/" + strings.ReplaceAll(t.Name(), "/", "_")})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		}},
	}
}

// takeoverFamilies are pools of exactly two addresses per range set, so
// that two pods fill them: IPv4 and IPv6 alone and side by side.
var takeoverFamilies = []struct {
	name  string
	pools []ipam.Pool
}{
	{"IPv4", []ipam.Pool{guardFamilies[0].pool}},
	{"IPv6", []ipam.Pool{guardFamilies[1].pool}},
	{"dual-stack", []ipam.Pool{guardFamilies[0].pool, guardFamilies[1].pool}},
}

// sandbox is the request of one pod sandbox's ADD: interface eth0 of
// network "net", pod ns/<uid>, network namespace /run/netns/<container>.
func sandbox(node, container, uid string, pools []ipam.Pool) allocator.Request {
	req := allocator.Request{Handle: ipam.Handle{
		ID: ipam.HandleID("net", container, "eth0"), Network: "net", ContainerID: container, IfName: "eth0",
		Node: node, NetNS: "/run/netns/" + container, Namespace: "ns", Pod: "pod-" + uid, PodUID: uid,
	}}
	for _, p := range pools {
		req.Sets = append(req.Sets, []string{p.Name})
	}
	return req
}

// setupTakeover ensures the pools in a fresh store of backend b and
// fills them with two pods: uid-a's old sandbox "old-a" and uid-b's "b".
func setupTakeover(t *testing.T, b takeoverBackend, pools []ipam.Pool) (*allocator.Allocator, kv.Store, ipam.Handle) {
	t.Helper()
	ctx := context.Background()
	s := b.open(t)
	a := newAllocator(t, s)
	for _, p := range pools {
		if _, err := a.EnsurePool(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	old, err := a.Allocate(ctx, sandbox("node-a", "old-a", "uid-a", pools))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Allocate(ctx, sandbox("node-a", "b", "uid-b", pools)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Allocate(ctx, sandbox("node-a", "new-a", "uid-a", pools)); !errors.Is(err, allocator.ErrExhausted) {
		t.Fatalf("test setup: the new sandbox's allocation on a full pool: %v, want ErrExhausted", err)
	}
	return a, s, old
}

// onlyCandidate returns the one takeover candidate of req, failing the
// test when there is not exactly one.
func onlyCandidate(t *testing.T, a *allocator.Allocator, req allocator.Request) allocator.Observed {
	t.Helper()
	cs, err := a.TakeoverCandidates(context.Background(), req.Handle)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 {
		t.Fatalf("candidates of %s: %+v, want exactly one", req.Handle.ID, cs)
	}
	return cs[0]
}

// TestTakeOver: on a full pool the new sandbox of pod uid-a takes over its
// old sandbox's addresses (every family of the request) in one
// transaction; the old handle is gone, the blocks give the addresses to
// the new handle, and a late DEL of the old sandbox releases nothing.
func TestTakeOver(t *testing.T) {
	ctx := context.Background()
	for _, b := range takeoverBackends(t) {
		for _, f := range takeoverFamilies {
			t.Run(b.name+"/"+f.name, func(t *testing.T) {
				a, s, old := setupTakeover(t, b, f.pools)
				req := sandbox("node-a", "new-a", "uid-a", f.pools)
				c := onlyCandidate(t, a, req)
				if c.Handle.ID != old.ID || c.Key != allocator.HandleKey(old.ID) {
					t.Fatalf("candidate %+v, want %s", c, old.ID)
				}
				h, err := a.TakeOver(ctx, req, c)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(h.IPs, old.IPs) || h.ID != req.Handle.ID || h.PodUID != "uid-a" || h.NetNS != req.Handle.NetNS || h.ContainerID != "new-a" {
					t.Fatalf("took over %+v, want the addresses of %+v for %s", h, old, req.Handle.ID)
				}
				owners := checkConsistent(t, a, s)
				for _, ip := range old.IPs {
					if owners[ip.Addr] != req.Handle.ID {
						t.Errorf("%v held by %q, want %s", ip.Addr, owners[ip.Addr], req.Handle.ID)
					}
				}
				if _, ok, err := a.Handle(ctx, old.ID); ok || err != nil {
					t.Errorf("old handle still there (%v)", err)
				}
				stored, ok, err := a.Handle(ctx, req.Handle.ID)
				if !ok || err != nil || !slices.Equal(stored.IPs, old.IPs) {
					t.Fatalf("stored new handle %+v %v %v", stored, ok, err)
				}
				// Adding the new sandbox again is idempotent.
				again, err := a.Allocate(ctx, req)
				if err != nil || !slices.Equal(again.IPs, old.IPs) {
					t.Fatalf("ADD again: %+v, %v", again, err)
				}
				// The old sandbox's DEL comes late: nothing of the new one's goes.
				freed, err := a.Release(ctx, old.ID)
				if err != nil || len(freed) != 0 {
					t.Fatalf("late release of the old sandbox freed %v (%v)", freed, err)
				}
				if owners := checkConsistent(t, a, s); owners[old.IPs[0].Addr] != req.Handle.ID {
					t.Fatalf("after the late DEL: owners %v", owners)
				}
				// Taking over again (the observation is stale): nothing changes.
				before := snapshot(t, s)
				if _, err := a.TakeOver(ctx, sandbox("node-a", "newer-a", "uid-a", f.pools), c); !errors.Is(err, allocator.ErrHandleChanged) {
					t.Fatalf("second takeover of the same observation: %v, want ErrHandleChanged", err)
				}
				sameStore(t, "a stale takeover", before, s)
			})
		}
	}
}

// TestTakeOverNeverOthers: handles of another pod UID, interface, node,
// network, or without a recorded network namespace, the attachment's own
// handle, and requests without a pod UID are never candidates, and
// TakeOver refuses them without changing anything.
func TestTakeOverNeverOthers(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		edit func(old *ipam.Handle, req *allocator.Request)
	}{
		{"another pod UID", func(_ *ipam.Handle, r *allocator.Request) { r.Handle.PodUID = "uid-z" }},
		{"another pod name", func(_ *ipam.Handle, r *allocator.Request) { r.Handle.Pod = "pod-z" }},
		{"another interface", func(_ *ipam.Handle, r *allocator.Request) {
			r.Handle.IfName = "net1"
			r.Handle.ID = ipam.HandleID("net", "new-a", "net1")
		}},
		{"another node", func(_ *ipam.Handle, r *allocator.Request) { r.Handle.Node = "node-b" }},
		{"another network", func(_ *ipam.Handle, r *allocator.Request) {
			r.Handle.Network = "net2"
			r.Handle.ID = ipam.HandleID("net2", "new-a", "eth0")
		}},
		{"the same container", func(_ *ipam.Handle, r *allocator.Request) {
			r.Handle.ContainerID = "old-a"
			r.Handle.ID = ipam.HandleID("net", "old-a", "eth0")
			r.Handle.NetNS = "/run/netns/elsewhere"
		}},
		{"the same network namespace path", func(old *ipam.Handle, r *allocator.Request) { r.Handle.NetNS = old.NetNS }},
		{"no pod UID in the request", func(_ *ipam.Handle, r *allocator.Request) { r.Handle.PodUID = "" }},
	}
	for _, b := range takeoverBackends(t) {
		for _, f := range takeoverFamilies {
			for _, tc := range cases {
				t.Run(b.name+"/"+f.name+"/"+tc.name, func(t *testing.T) {
					a, s, old := setupTakeover(t, b, f.pools)
					req := sandbox("node-a", "new-a", "uid-a", f.pools)
					c := onlyCandidate(t, a, req) // the unchanged request has one
					tc.edit(&old, &req)
					cs, err := a.TakeoverCandidates(ctx, req.Handle)
					if err != nil || len(cs) != 0 {
						t.Fatalf("candidates %+v (%v), want none", cs, err)
					}
					before := snapshot(t, s)
					if _, err := a.TakeOver(ctx, req, c); !errors.Is(err, allocator.ErrTakeoverRefused) {
						t.Fatalf("TakeOver: %v, want ErrTakeoverRefused", err)
					}
					sameStore(t, "a refused takeover", before, s)
				})
			}
		}
	}
	// A handle that records no network namespace (the runtime gave none,
	// or an import made it) proves nothing about its sandbox.
	for _, b := range takeoverBackends(t) {
		t.Run(b.name+"/no network namespace recorded", func(t *testing.T) {
			pools := takeoverFamilies[0].pools
			s := b.open(t)
			a := newAllocator(t, s)
			if _, err := a.EnsurePool(ctx, pools[0]); err != nil {
				t.Fatal(err)
			}
			old := sandbox("node-a", "old-a", "uid-a", pools)
			old.Handle.NetNS = ""
			if _, err := a.Allocate(ctx, old); err != nil {
				t.Fatal(err)
			}
			cs, err := a.TakeoverCandidates(ctx, sandbox("node-a", "new-a", "uid-a", pools).Handle)
			if err != nil || len(cs) != 0 {
				t.Fatalf("candidates %+v (%v), want none", cs, err)
			}
		})
	}
}

// TestTakeOverUnsatisfiable: the old handle's addresses must satisfy the
// request exactly, or nothing is taken: a dual-stack request does not
// take a single-stack allocation (nor the reverse), and a request for a
// specific address the old handle does not hold takes nothing.
func TestTakeOverUnsatisfiable(t *testing.T) {
	ctx := context.Background()
	v4, v6 := guardFamilies[0].pool, guardFamilies[1].pool
	cases := []struct {
		name     string
		old, new []ipam.Pool
		want     func(old ipam.Handle) []netip.Addr
	}{
		{"IPv4 old, dual-stack request", []ipam.Pool{v4}, []ipam.Pool{v4, v6}, nil},
		{"IPv6 old, dual-stack request", []ipam.Pool{v6}, []ipam.Pool{v4, v6}, nil},
		{"dual-stack old, IPv4 request", []ipam.Pool{v4, v6}, []ipam.Pool{v4}, nil},
		{"dual-stack old, IPv6 request", []ipam.Pool{v4, v6}, []ipam.Pool{v6}, nil},
		{"IPv4 old, IPv6 request", []ipam.Pool{v4}, []ipam.Pool{v6}, nil},
		{"IPv4 static request for another address", []ipam.Pool{v4}, []ipam.Pool{v4}, func(ipam.Handle) []netip.Addr { return []netip.Addr{addr("10.44.0.3")} }},
		{"IPv6 static request for another address", []ipam.Pool{v6}, []ipam.Pool{v6}, func(ipam.Handle) []netip.Addr { return []netip.Addr{addr("fd44::3")} }},
	}
	for _, b := range takeoverBackends(t) {
		for _, tc := range cases {
			t.Run(b.name+"/"+tc.name, func(t *testing.T) {
				s := b.open(t)
				a := newAllocator(t, s)
				for _, p := range []ipam.Pool{v4, v6} {
					if _, err := a.EnsurePool(ctx, p); err != nil {
						t.Fatal(err)
					}
				}
				old, err := a.Allocate(ctx, sandbox("node-a", "old-a", "uid-a", tc.old))
				if err != nil {
					t.Fatal(err)
				}
				if old.IPs[0].Addr == addr("10.44.0.3") || old.IPs[0].Addr == addr("fd44::3") {
					t.Fatalf("test setup: the old sandbox got %v, the address the static requests ask for", old.IPs)
				}
				req := sandbox("node-a", "new-a", "uid-a", tc.new)
				if tc.want != nil {
					req.Want = tc.want(old)
				}
				c := onlyCandidate(t, a, req)
				before := snapshot(t, s)
				if h, err := a.TakeOver(ctx, req, c); !errors.Is(err, allocator.ErrTakeoverRefused) {
					t.Fatalf("TakeOver: %+v, %v; want ErrTakeoverRefused", h, err)
				}
				sameStore(t, "an unsatisfiable takeover", before, s)
			})
		}
	}
	// The static request for the very address the old sandbox holds is
	// satisfied.
	for _, b := range takeoverBackends(t) {
		t.Run(b.name+"/static request for the held address", func(t *testing.T) {
			a, s, old := setupTakeover(t, b, []ipam.Pool{v4, v6})
			req := sandbox("node-a", "new-a", "uid-a", []ipam.Pool{v4, v6})
			req.Want = []netip.Addr{old.IPs[1].Addr}
			h, err := a.TakeOver(ctx, req, onlyCandidate(t, a, req))
			if err != nil || !slices.Equal(h.IPs, old.IPs) {
				t.Fatalf("TakeOver: %+v, %v", h, err)
			}
			checkConsistent(t, a, s)
		})
	}
}

// TestTakeOverGuarded: what happens to the old handle between the
// observation and the takeover's commit wins, and no address ever has
// two owners: a release and reallocation before the takeover starts, the
// same racing into the takeover's commit, and another takeover racing it.
func TestTakeOverGuarded(t *testing.T) {
	ctx := context.Background()
	races := []struct {
		name string
		// race runs on a0 (another allocator on the same store) after the
		// observation c; it returns the handle that must keep old's
		// addresses afterwards.
		race func(t *testing.T, a0 *allocator.Allocator, c allocator.Observed, pools []ipam.Pool) string
	}{
		{"released and reallocated", func(t *testing.T, a0 *allocator.Allocator, c allocator.Observed, pools []ipam.Pool) string {
			if _, err := a0.ReleaseObserved(ctx, c); err != nil {
				t.Fatal(err)
			}
			h, err := a0.Allocate(ctx, sandbox("node-b", "intruder", "uid-z", pools))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(addrsOf(h), addrsOf(c.Handle)) {
				t.Fatalf("test setup: the intruder got %v, want %v", addrsOf(h), addrsOf(c.Handle))
			}
			return h.ID
		}},
		{"record rewritten", func(t *testing.T, a0 *allocator.Allocator, c allocator.Observed, pools []ipam.Pool) string {
			// The record changes and its blocks do not: only the guard on
			// the handle's own version can tell.
			h := c.Handle
			h.Node = "node-z"
			if err := a0.Store().Txn(ctx, []kv.Cond{{Key: c.Key, Version: c.Version}}, []kv.Op{{Key: c.Key, Value: allocator.Encode(h)}}); err != nil {
				t.Fatal(err)
			}
			return h.ID
		}},
		{"record written again unchanged", func(t *testing.T, a0 *allocator.Allocator, c allocator.Observed, pools []ipam.Pool) string {
			// Only the version changes: the observation is stale all the
			// same, and the takeover says so rather than retrying on.
			es, err := a0.Store().Get(ctx, c.Key)
			if err != nil {
				t.Fatal(err)
			}
			if err := a0.Store().Txn(ctx, []kv.Cond{{Key: c.Key, Version: c.Version}}, []kv.Op{{Key: c.Key, Value: es[0].Value}}); err != nil {
				t.Fatal(err)
			}
			return c.Handle.ID
		}},
		{"taken over by another sandbox", func(t *testing.T, a0 *allocator.Allocator, c allocator.Observed, pools []ipam.Pool) string {
			h, err := a0.TakeOver(ctx, sandbox("node-a", "rival-a", "uid-a", pools), c)
			if err != nil {
				t.Fatal(err)
			}
			return h.ID
		}},
	}
	for _, b := range takeoverBackends(t) {
		for _, f := range takeoverFamilies {
			for _, r := range races {
				// Before the takeover starts.
				t.Run(b.name+"/"+f.name+"/"+r.name+" before", func(t *testing.T) {
					a, s, old := setupTakeover(t, b, f.pools)
					req := sandbox("node-a", "new-a", "uid-a", f.pools)
					c := onlyCandidate(t, a, req)
					winner := r.race(t, newAllocator(t, s), c, f.pools)
					before := snapshot(t, s)
					if _, err := a.TakeOver(ctx, req, c); !errors.Is(err, allocator.ErrHandleChanged) {
						t.Fatalf("TakeOver: %v, want ErrHandleChanged", err)
					}
					sameStore(t, "a takeover of a changed handle", before, s)
					owners := checkConsistent(t, a, s)
					for _, ip := range old.IPs {
						if owners[ip.Addr] != winner {
							t.Errorf("%v held by %q, want %s", ip.Addr, owners[ip.Addr], winner)
						}
					}
				})
				// Between the takeover's read and its commit.
				t.Run(b.name+"/"+f.name+"/"+r.name+" during", func(t *testing.T) {
					a0, s, old := setupTakeover(t, b, f.pools)
					req := sandbox("node-a", "new-a", "uid-a", f.pools)
					c := onlyCandidate(t, a0, req)
					hs := &onceTxnStore{Store: s, key: allocator.HandleKey(req.Handle.ID)}
					var winner string
					hs.hook = func() { winner = r.race(t, a0, c, f.pools) }
					a := newAllocator(t, hs)
					if _, err := a.TakeOver(ctx, req, c); !errors.Is(err, allocator.ErrHandleChanged) {
						t.Fatalf("TakeOver: %v, want ErrHandleChanged", err)
					}
					if winner == "" {
						t.Fatal("the race never ran: the takeover committed nothing")
					}
					owners := checkConsistent(t, a, s)
					for _, ip := range old.IPs {
						if owners[ip.Addr] != winner {
							t.Errorf("%v held by %q, want %s", ip.Addr, owners[ip.Addr], winner)
						}
					}
					if _, ok, _ := a.Handle(ctx, req.Handle.ID); ok {
						t.Error("the losing takeover stored a handle")
					}
				})
			}
		}
	}
}

// TestTakeoverCandidatesOrder: several earlier sandboxes of the pod are
// candidates newest first; other pods' handles are not.
func TestTakeoverCandidatesOrder(t *testing.T) {
	ctx := context.Background()
	pool := ipam.Pool{Name: "big", CIDR: prefix("10.45.0.0/24"), BlockSize: 26}
	for _, b := range takeoverBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			s := b.open(t)
			a := newAllocator(t, s)
			if _, err := a.EnsurePool(ctx, pool); err != nil {
				t.Fatal(err)
			}
			for i, c := range []string{"s1", "s2", "s3"} {
				a.Now = func() time.Time { return epoch.Add(time.Duration(i) * time.Second) }
				if _, err := a.Allocate(ctx, sandbox("node-a", c, "uid-a", []ipam.Pool{pool})); err != nil {
					t.Fatal(err)
				}
				if _, err := a.Allocate(ctx, sandbox("node-a", fmt.Sprint("x", i), "uid-x", []ipam.Pool{pool})); err != nil {
					t.Fatal(err)
				}
			}
			cs, err := a.TakeoverCandidates(ctx, sandbox("node-a", "s4", "uid-a", []ipam.Pool{pool}).Handle)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range cs {
				got = append(got, c.Handle.ContainerID)
			}
			if !slices.Equal(got, []string{"s3", "s2", "s1"}) {
				t.Fatalf("candidates %v, want s3 s2 s1", got)
			}
		})
	}
}

// TestTakeOverMismatchedObservation: an observation at the stored version
// whose record differs from the stored one (a store whose versions could
// lie, or a caller's mistake) takes nothing.
func TestTakeOverMismatchedObservation(t *testing.T) {
	ctx := context.Background()
	for _, b := range takeoverBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			pools := takeoverFamilies[0].pools
			a, s, _ := setupTakeover(t, b, pools)
			req := sandbox("node-a", "new-a", "uid-a", pools)
			c := onlyCandidate(t, a, req)
			c.Handle.Created = c.Handle.Created.Add(time.Hour)
			before := snapshot(t, s)
			if _, err := a.TakeOver(ctx, req, c); !errors.Is(err, allocator.ErrHandleChanged) {
				t.Fatalf("TakeOver: %v, want ErrHandleChanged", err)
			}
			sameStore(t, "a mismatched observation", before, s)
		})
	}
}

// TestTakeOverAdoptsImportedPool: a pool an import created, full from the
// start, is adopted by the config's definition in the takeover's own
// transaction, as an allocation would have adopted it.
func TestTakeOverAdoptsImportedPool(t *testing.T) {
	ctx := context.Background()
	for _, b := range takeoverBackends(t) {
		for _, f := range guardFamilies {
			t.Run(b.name+"/"+f.name, func(t *testing.T) {
				s := b.open(t)
				a := newAllocator(t, s)
				imported := f.pool
				imported.Origin = "import"
				imported.Gateway = imported.CIDR.Addr().Next()
				if err := a.CreatePool(ctx, imported); err != nil {
					t.Fatal(err)
				}
				pools := []ipam.Pool{f.pool}
				old, err := a.Allocate(ctx, sandbox("node-a", "old-a", "uid-a", pools)) // no Define: as the importer wrote it
				if err != nil {
					t.Fatal(err)
				}
				if _, err := a.Allocate(ctx, sandbox("node-a", "b", "uid-b", pools)); err != nil {
					t.Fatal(err)
				}
				def := f.pool
				def.Origin = "config"
				req := sandbox("node-a", "new-a", "uid-a", pools)
				req.Define = []ipam.Pool{def}
				if _, err := a.Allocate(ctx, req); !errors.Is(err, allocator.ErrExhausted) {
					t.Fatalf("test setup: %v, want ErrExhausted", err)
				}
				h, err := a.TakeOver(ctx, req, onlyCandidate(t, a, req))
				if err != nil || !slices.Equal(h.IPs, old.IPs) {
					t.Fatalf("TakeOver: %+v, %v; want %v", h, err, old.IPs)
				}
				stored, err := a.Pool(ctx, f.pool.Name)
				if err != nil || stored.Origin != "config" || stored.Gateway.IsValid() {
					t.Fatalf("pool after the takeover: %+v (%v), want the config's definition", stored, err)
				}
				checkConsistent(t, a, s)
			})
		}
	}
}
