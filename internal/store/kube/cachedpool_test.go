package kube

import (
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// TestGetPoolCached: a cached read answers what GetPool answers once the
// watch cache caught up, ErrNotFound for an absent pool, and refuses a
// name the store cannot hold.
func TestGetPoolCached(t *testing.T) {
	st := openStore(t)
	ctx := ctxT(t)
	if _, err := st.GetPoolCached(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("cached read of an absent pool: %v, want ErrNotFound", err)
	}
	if _, err := st.GetPoolCached(ctx, "a/b"); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("cached read of pool a/b: %v, want ErrInvalid", err)
	}
	for _, spec := range []ipam.Pool{pool4, pool6} {
		want, err := st.CreatePool(ctx, store.Pool{Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			got, err := st.GetPoolCached(ctx, spec.Name)
			if err == nil && got.Version == want.Version && got.Spec.SameDefinition(want.Spec) {
				break
			}
			if err != nil && !errors.Is(err, store.ErrNotFound) || time.Now().After(deadline) {
				t.Fatalf("cached read of pool %q: %+v, %v; want %+v", spec.Name, got, err, want)
			}
		}
	}
}

// TestFirstADDPoolReads: a node's first ADD on the kubernetes datastore
// takes its view of the pool from the API server's watch cache, and reads
// the pool up to date after claiming its block (pool removal's check is
// never answered by a cache).
func TestFirstADDPoolReads(t *testing.T) {
	st, log := openTraced(t)
	for _, p := range []ipam.Pool{
		{Name: "plain4", CIDR: netip.MustParsePrefix("10.1.0.0/16"), BlockSize: 26},
		{Name: "plain6", CIDR: netip.MustParsePrefix("fd00:1::/112"), BlockSize: 122},
	} {
		t.Run(p.Name, func(t *testing.T) { firstADDPoolReads(t, st, log, p) })
	}
}

func firstADDPoolReads(t *testing.T, st *Store, log *requestLog, pool ipam.Pool) {
	ctx := ctxT(t)
	if _, err := st.CreatePool(ctx, store.Pool{Spec: pool}); err != nil {
		t.Fatal(err)
	}
	// Let the watch cache see the pool, as it does milliseconds after.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := st.GetPoolCached(ctx, pool.Name); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	log.take()
	a := allocator.New(st, nil)
	h := ipam.Handle{ID: ipam.HandleID("net", "c1", "eth0"), Network: "net", ContainerID: "c1", IfName: "eth0", Node: "node-" + pool.Name}
	if _, err := a.Allocate(ctx, allocator.Request{Handle: h, Sets: [][]string{{pool.Name}}}); err != nil {
		t.Fatal(err)
	}
	var queries []string
	for _, e := range log.take() {
		if e.method == http.MethodGet && strings.Contains(e.path, "/"+ResourcePools+"/") {
			queries = append(queries, e.query)
		}
	}
	if len(queries) != 2 || queries[0] != "resourceVersion=0" || queries[1] != "" {
		t.Fatalf("pool GETs of a first ADD, by query: %q; want the watch cache's (resourceVersion=0), then the latest state", queries)
	}
}
