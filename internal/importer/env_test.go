package importer_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/importer"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
)

// etcdServer is the embedded etcd this package's typed-store tests share,
// each under a key prefix of its own.
var (
	etcdServer   *etcdtest.Server
	etcdPrefixes atomic.Int64
)

func TestMain(m *testing.M) {
	s, stop := etcdtest.Shared()
	etcdServer = s
	code := m.Run()
	stop()
	os.Exit(code)
}

// env is a fresh typed store with the import that writes it (ApplyStore)
// and the allocator that then works on it.
type env struct {
	apply func(ctx context.Context, plan *importer.Plan, dryRun bool) (importer.Result, error)
	// dump lists every stored object with its version.
	dump func(t *testing.T) string
	// check fails unless the store is consistent.
	check func(t *testing.T)
	// createPool stores a pool as an operator would.
	createPool func(t *testing.T, p ipam.Pool)
	// freeAddr releases one address behind the import's back.
	freeAddr func(t *testing.T, a netip.Addr)
	// otherHandle stores handle id of node holding addresses the import
	// does not give it.
	otherHandle func(t *testing.T, node, id string)
	allocate    func(ctx context.Context, req allocator.Request) (ipam.Handle, error)
	release     func(ctx context.Context, node, id string) ([]netip.Addr, error)
	// typed is the store.
	typed store.Store
}

// envs are the datastores every import test runs on: the typed store on a
// bbolt file and on the embedded etcd.
var envs = []struct {
	name string
	open func(t *testing.T) *env
}{
	{"store-local", func(t *testing.T) *env {
		s, err := datastore.Open(t.Context(), config.Datastore{Type: config.DatastoreLocal, Path: t.TempDir()}, datastore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return storeEnv(s)
	}},
	{"store-etcd", func(t *testing.T) *env {
		s, err := datastore.Open(t.Context(), config.Datastore{Type: config.DatastoreEtcd,
			Endpoints: []string{etcdServer.Endpoint},
			Prefix:    fmt.Sprintf("/imp%d-%s", etcdPrefixes.Add(1), strings.ReplaceAll(t.Name(), "/", "_")),
		}, datastore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return storeEnv(s)
	}},
}

// eachEnv runs fn on a fresh store of every env.
func eachEnv(t *testing.T, fn func(t *testing.T, e *env)) {
	for _, e := range envs {
		t.Run(e.name, func(t *testing.T) { fn(t, e.open(t)) })
	}
}

// otherPool is a pool apart from the imported ones.
var otherPool = ipam.Pool{Name: "other", CIDR: netip.MustParsePrefix("10.99.0.0/24"), BlockSize: 28}

func storeEnv(s store.Store) *env {
	a := allocator.New(s, nil)
	return &env{
		typed: s,
		apply: func(ctx context.Context, plan *importer.Plan, dryRun bool) (importer.Result, error) {
			return importer.ApplyStore(ctx, s, plan, dryRun)
		},
		dump:  func(t *testing.T) string { return dumpStore(t, s) },
		check: func(t *testing.T) { checkStore(t, s) },
		createPool: func(t *testing.T, p ipam.Pool) {
			if err := a.CreatePool(context.Background(), p); err != nil {
				t.Fatal(err)
			}
		},
		freeAddr: func(t *testing.T, addr netip.Addr) {
			if _, err := a.ReleaseAddr(context.Background(), addr); err != nil {
				t.Fatal(err)
			}
		},
		otherHandle: func(t *testing.T, node, id string) {
			if _, err := a.EnsurePool(context.Background(), otherPool); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Allocate(context.Background(), allocator.Request{Handle: ipam.Handle{ID: id, Node: node}, Sets: [][]string{{otherPool.Name}}}); err != nil {
				t.Fatal(err)
			}
		},
		allocate: a.Allocate,
		release:  a.Release,
	}
}

// dumpStore lists every pool, claim and node object with its version.
func dumpStore(t *testing.T, s store.Store) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	pools, err := s.ListPools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pools {
		fmt.Fprintf(&b, "pool %s@%s\n", p.Spec.Name, p.Version)
	}
	claims, err := s.ListClaims(ctx, store.ClaimSelector{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claims {
		fmt.Fprintf(&b, "claim %s %s@%s\n", c.BlockRef, c.Node, c.Version)
	}
	nodes, err := s.ListNodes(ctx, store.NodeSelector{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		fmt.Fprintf(&b, "node %s@%s\n", n.Name, n.Version)
	}
	return b.String()
}

// checkStore fails unless the typed store is consistent: every node object
// decodes and validates (ListNodes refuses one that does not), every block
// of an object has a claim naming it and every claim's object holds its
// block, and records in other nodes' objects and loans name each other.
func checkStore(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	nodes, err := s.ListNodes(ctx, store.NodeSelector{})
	if err != nil {
		t.Fatal(err)
	}
	claims, err := s.ListClaims(ctx, store.ClaimSelector{})
	if err != nil {
		t.Fatal(err)
	}
	objects := map[string]store.Node{}
	held := 0
	for _, n := range nodes {
		objects[n.Name] = n
		for _, b := range n.Blocks {
			held++
			if c, err := s.GetClaim(ctx, store.BlockRef{Pool: b.Pool, CIDR: b.CIDR}); err != nil || c.Node != n.Name {
				t.Errorf("block %s/%s in %s's object: claim %+v, %v", b.Pool, b.CIDR, n.Name, c, err)
			}
		}
	}
	for _, c := range claims {
		if _, ok := objects[c.Node].Block(c.BlockRef); !ok {
			t.Errorf("claim of %s names %s, whose object does not hold the block", c.BlockRef, c.Node)
		}
	}
	if held != len(claims) {
		t.Errorf("%d blocks in node objects, %d claims", held, len(claims))
	}
	for _, n := range nodes {
		for _, h := range n.Handles {
			if h.Node != n.Name && !slices.Contains(objects[h.Node].LendersOf(h.ID), n.Name) {
				t.Errorf("record of %s (node %s) in %s without a loan", h.ID, h.Node, n.Name)
			}
		}
		for _, l := range n.Loans {
			if r, ok := objects[l.Lender].Handle(l.Handle); !ok || r.Node != n.Name {
				t.Errorf("loan %+v of %s without its record", l, n.Name)
			}
		}
	}
}
