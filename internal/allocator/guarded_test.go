package allocator_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
)

// guardFamilies are one-block pools of each family with few addresses, so
// that an address released and allocated again is the same address.
var guardFamilies = []struct {
	name string
	pool ipam.Pool
}{
	{"IPv4", ipam.Pool{Name: "g4", CIDR: prefix("10.44.0.0/29"), BlockSize: 29, RangeStart: addr("10.44.0.2"), RangeEnd: addr("10.44.0.3")}},
	{"IPv6", ipam.Pool{Name: "g6", CIDR: prefix("fd44::/125"), BlockSize: 125, RangeStart: addr("fd44::2"), RangeEnd: addr("fd44::3")}},
}

// observed returns the observation of handle id.
func observed(t *testing.T, a *allocator.Allocator, id string) allocator.Observed {
	t.Helper()
	os, err := a.ObserveHandles(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(os, func(o allocator.Observed) bool { return o.Handle.ID == id })
	if i < 0 {
		t.Fatalf("handle %s not observed", id)
	}
	return os[i]
}

func TestReleaseObserved(t *testing.T) {
	ctx := context.Background()
	for _, f := range guardFamilies {
		t.Run(f.name, func(t *testing.T) {
			a, s := setup(t, f.pool)
			h := allocate(t, a, "node-a", "c1", set(f.pool.Name))
			keep := allocate(t, a, "node-a", "c2", set(f.pool.Name))
			o := observed(t, a, "c1")
			if o.Key != allocator.HandleKey("c1") || o.Version == 0 || o.Handle.IPs[0] != h.IPs[0] {
				t.Fatalf("observation %+v", o)
			}
			freed, err := a.ReleaseObserved(ctx, o)
			if err != nil || !slices.Equal(freed, []netip.Addr{h.IPs[0].Addr}) {
				t.Fatalf("ReleaseObserved = %v, %v; want [%v]", freed, err, h.IPs[0].Addr)
			}
			owners := checkConsistent(t, a, s)
			if _, held := owners[h.IPs[0].Addr]; held || owners[keep.IPs[0].Addr] != "c2" {
				t.Fatalf("after release: owners %v", owners)
			}
			// Again: the handle is gone, nothing changes.
			before := snapshot(t, s)
			if _, err := a.ReleaseObserved(ctx, o); !errors.Is(err, allocator.ErrHandleChanged) {
				t.Fatalf("second release: %v, want ErrHandleChanged", err)
			}
			sameStore(t, "a second release", before, s)
		})
	}
}

// TestReleaseObservedReallocated: the handle was released and allocated
// again between the observation and the release — same ID, same address,
// same creation time (the allocator's clock is fixed) — so only the
// version tells; the new allocation must survive.
func TestReleaseObservedReallocated(t *testing.T) {
	ctx := context.Background()
	for _, f := range guardFamilies {
		t.Run(f.name, func(t *testing.T) {
			a, s := setup(t, f.pool)
			first := allocate(t, a, "node-a", "c1", set(f.pool.Name))
			o := observed(t, a, "c1")
			if _, err := a.Release(ctx, "c1"); err != nil {
				t.Fatal(err)
			}
			// Fill the pool so the other address is taken and c1 gets its
			// old address back.
			allocate(t, a, "node-a", "other", set(f.pool.Name))
			again := allocate(t, a, "node-a", "c1", set(f.pool.Name))
			if again.IPs[0] != first.IPs[0] || !again.Created.Equal(first.Created) {
				t.Fatalf("test setup: reallocated %+v, first %+v", again, first)
			}
			before := snapshot(t, s)
			if _, err := a.ReleaseObserved(ctx, o); !errors.Is(err, allocator.ErrHandleChanged) {
				t.Fatalf("ReleaseObserved of a reallocated handle: %v, want ErrHandleChanged", err)
			}
			sameStore(t, "releasing a reallocated handle", before, s)
			if owners := checkConsistent(t, a, s); owners[first.IPs[0].Addr] != "c1" {
				t.Fatalf("the new allocation lost its address: %v", owners)
			}
		})
	}
}

// TestReleaseObservedOtherHolder: the address went to another handle.
func TestReleaseObservedOtherHolder(t *testing.T) {
	ctx := context.Background()
	for _, f := range guardFamilies {
		t.Run(f.name, func(t *testing.T) {
			a, s := setup(t, f.pool)
			first := allocate(t, a, "node-a", "c1", set(f.pool.Name))
			allocate(t, a, "node-a", "c2", set(f.pool.Name))
			o := observed(t, a, "c1")
			if _, err := a.Release(ctx, "c1"); err != nil {
				t.Fatal(err)
			}
			next := allocate(t, a, "node-b", "c3", set(f.pool.Name))
			if next.IPs[0].Addr != first.IPs[0].Addr {
				t.Fatalf("test setup: c3 got %v, want %v", next.IPs[0].Addr, first.IPs[0].Addr)
			}
			before := snapshot(t, s)
			if _, err := a.ReleaseObserved(ctx, o); !errors.Is(err, allocator.ErrHandleChanged) {
				t.Fatalf("ReleaseObserved: %v, want ErrHandleChanged", err)
			}
			sameStore(t, "releasing a handle whose address went to another", before, s)
		})
	}
}

// TestReleaseObservedRewritten: the record was rewritten with the same
// version-independent content but another pod UID; a version alone would
// already refuse, and the content check refuses too when the version is
// forged to match.
func TestReleaseObservedRewritten(t *testing.T) {
	ctx := context.Background()
	f := guardFamilies[0]
	a, s := setup(t, f.pool)
	allocate(t, a, "node-a", "c1", set(f.pool.Name))
	o := observed(t, a, "c1")
	forged := o
	forged.Handle.PodUID = "another"
	before := snapshot(t, s)
	if _, err := a.ReleaseObserved(ctx, forged); !errors.Is(err, allocator.ErrHandleChanged) {
		t.Fatalf("ReleaseObserved of another allocation at the same version: %v, want ErrHandleChanged", err)
	}
	sameStore(t, "a mismatched observation", before, s)
	if _, err := a.ReleaseObserved(ctx, allocator.Observed{Handle: o.Handle, Key: o.Key}); err == nil {
		t.Fatal("an observation without a version was accepted")
	}
}

// onceTxnStore runs hook once before the first transaction that touches key.
type onceTxnStore struct {
	kv.Store
	key  string
	once sync.Once
	hook func()
}

func (h *onceTxnStore) Txn(ctx context.Context, conds []kv.Cond, ops []kv.Op) error {
	for _, op := range ops {
		if op.Key == h.key {
			h.once.Do(h.hook)
		}
	}
	return h.Store.Txn(ctx, conds, ops)
}

// TestReleaseObservedBlockConflict: another allocation in the block
// commits between the release's read and its commit; the release retries
// and frees only its own address.
func TestReleaseObservedBlockConflict(t *testing.T) {
	ctx := context.Background()
	for _, f := range guardFamilies {
		t.Run(f.name, func(t *testing.T) {
			a0, s := setup(t, f.pool)
			h := allocate(t, a0, "node-a", "c1", set(f.pool.Name))
			hs := &onceTxnStore{Store: s, key: allocator.BlockKey(f.pool.Name, h.IPs[0].Block)}
			a := newAllocator(t, hs)
			hs.hook = func() { allocate(t, a0, "node-a", "c2", set(f.pool.Name)) }
			o := observed(t, a, "c1")
			if _, err := a.ReleaseObserved(ctx, o); err != nil {
				t.Fatal(err)
			}
			owners := checkConsistent(t, a, s)
			if len(owners) != 1 || slices.Collect(mapsValues(owners))[0] != "c2" {
				t.Fatalf("owners %v, want only c2", owners)
			}
		})
	}
}

func mapsValues(m map[netip.Addr]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}
