package etcd_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/consistency"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
)

// dropProxy is a gRPC (HTTP/2) proxy on loopback in front of the test's etcd. For
// a write transaction its rule picks, it forwards the request, waits for
// etcd's answer (the transaction is decided then), and closes the client's
// connection instead of passing the answer on: the client's request may
// have applied, and it cannot tell.
type dropProxy struct {
	target string
	client *http.Client
	mu     sync.Mutex
	// armed makes the proxy lose the answer to the next write
	// transaction, running before (if set) ahead of forwarding it and
	// after (if set) once etcd has answered.
	armed         bool
	before, after func()
	dropped       int
}

// dropNext loses the answer to the next write transaction; before runs
// just ahead of it reaching etcd, after once etcd has decided it.
func (p *dropProxy) dropNext(before, after func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed, p.before, p.after = true, before, after
}

func (p *dropProxy) droppedCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

func (p *dropProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	var before, after func()
	drop := false
	if r.URL.Path == "/etcdserverpb.KV/Txn" && etcd.IsWriteTxn(body) {
		p.mu.Lock()
		before, after, drop = p.before, p.after, p.armed
		p.armed, p.before, p.after = false, nil, nil
		p.mu.Unlock()
	}
	if before != nil {
		before()
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, p.target+r.URL.Path, bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := p.client.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if drop {
		p.mu.Lock()
		p.dropped++
		p.mu.Unlock()
		if after != nil {
			after()
		}
		// Reset the stream: the client has sent its request and gets
		// no answer.
		panic(http.ErrAbortHandler)
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(data)
	for k, v := range resp.Trailer {
		w.Header()[http.TrailerPrefix+k] = v
	}
}

// proxied returns a store that reaches the shared etcd through a dropProxy
// under prefix, and a store for the same prefix that reaches etcd directly.
func proxied(t *testing.T, prefix string) (*dropProxy, *etcd.Store, *etcd.Store) {
	t.Helper()
	// gRPC in the clear: HTTP/2 with prior knowledge on both sides.
	h2c := new(http.Protocols)
	h2c.SetUnencryptedHTTP2(true)
	p := &dropProxy{target: server.Endpoint, client: &http.Client{Transport: &http.Transport{Protocols: h2c}}}
	srv := httptest.NewUnstartedServer(p)
	srv.Config.Protocols = h2c
	srv.Start()
	t.Cleanup(srv.Close)
	t.Cleanup(p.client.CloseIdleConnections)
	via, err := etcd.Open(t.Context(), etcd.Config{Endpoints: []string{srv.URL}, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { via.Close() })
	direct, err := etcd.Open(t.Context(), etcd.Config{Endpoints: []string{server.Endpoint}, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { direct.Close() })
	return p, via, direct
}

// A transaction whose answer is lost after etcd decided it reports what
// etcd decided: success when it applied (written once, not twice), a
// conflict when it did not (nothing written).
func TestLostAnswerKV(t *testing.T) {
	ctx := t.Context()
	p, via, direct := proxied(t, fmt.Sprintf("/lost%d", prefixes.Add(1)))
	if err := direct.Txn(ctx, nil, []kv.Op{{Key: "k", Value: []byte("v0")}}); err != nil {
		t.Fatal(err)
	}
	before, err := direct.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}

	// Applied, answer lost: success, and the key holds the value once.
	p.dropNext(nil, nil)
	err = via.Txn(ctx, []kv.Cond{{Key: "k", Version: before[0].Version}}, []kv.Op{{Key: "k", Value: []byte("v1")}, {Key: "gone", Delete: true}})
	if err != nil {
		t.Fatalf("Txn that applied, answer lost: %v, want success", err)
	}
	after, err := direct.Get(ctx, "k")
	if err != nil || string(after[0].Value) != "v1" {
		t.Fatalf("after: %+v %v", after, err)
	}
	rev, err := direct.Get(ctx, "k")
	if err != nil || rev[0].Version != after[0].Version {
		t.Fatalf("written twice: %+v", rev)
	}

	// Not applied (its condition failed), answer lost: a conflict, and
	// nothing written.
	p.dropNext(nil, nil)
	err = via.Txn(ctx, []kv.Cond{{Key: "k", Version: before[0].Version}}, []kv.Op{{Key: "k", Value: []byte("v2")}})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Txn that did not apply, answer lost: %v, want a conflict", err)
	}
	if now, err := direct.Get(ctx, "k"); err != nil || string(now[0].Value) != "v1" || now[0].Version != after[0].Version {
		t.Fatalf("a failed Txn wrote: %+v %v", now, err)
	}

	// The caller's context ends as the answer is lost (the plugin's
	// deadline): Txn still finds out what happened before it returns.
	cur, err := direct.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		version int64
		value   string
		applied bool
	}{
		{"applied", cur[0].Version, "v3", true},
		{"not applied", before[0].Version, "v4", false},
	} {
		cctx, cancel := context.WithCancel(ctx)
		p.dropNext(nil, cancel)
		err := via.Txn(cctx, []kv.Cond{{Key: "k", Version: c.version}}, []kv.Op{{Key: "k", Value: []byte(c.value)}})
		cancel()
		now, gerr := direct.Get(ctx, "k")
		if gerr != nil {
			t.Fatal(gerr)
		}
		if c.applied && (err != nil || string(now[0].Value) != c.value) {
			t.Fatalf("%s, answer lost, caller gone: %v, store holds %q", c.name, err, now[0].Value)
		}
		if !c.applied && (!errors.Is(err, store.ErrConflict) || string(now[0].Value) == c.value) {
			t.Fatalf("%s, answer lost, caller gone: %v, store holds %q", c.name, err, now[0].Value)
		}
	}
	if n := p.droppedCount(); n != 4 {
		t.Fatalf("the proxy dropped %d answers, want 4: the test tested nothing", n)
	}
}

// Allocations whose commit answer is lost, IPv4 and IPv6, on the typed
// store kept in etcd (kvbacked): one that applied returns its address (the
// one the store holds, held once); one whose node object write lost to a
// concurrent allocation of the same address (conflict, not applied) is
// retried and returns another address, never the one the other handle
// holds. A release whose answer is lost is a release.
func TestLostAnswerAllocation(t *testing.T) {
	for _, fam := range []struct{ name, cidr string }{{"v4", "10.66.0.0/24"}, {"v6", "fd66::/120"}} {
		t.Run(fam.name, func(t *testing.T) {
			ctx := t.Context()
			p, via, direct := proxied(t, fmt.Sprintf("/lostalloc%d", prefixes.Add(1)))
			// The typed stores own via and direct, which proxied closes.
			typed := kvbacked.New(direct)
			cidr := netip.MustParsePrefix(fam.cidr)
			pool := ipam.Pool{Name: "p", CIDR: cidr, BlockSize: cidr.Addr().BitLen() - 4, Origin: "cli"}
			other := allocator.New(typed, nil)
			if err := other.CreatePool(ctx, pool); err != nil {
				t.Fatal(err)
			}
			req := func(id string) allocator.Request {
				return allocator.Request{Handle: ipam.Handle{ID: id, Network: "net", ContainerID: id, IfName: "eth0", Node: "node-a"},
					Sets: [][]string{{"p"}}}
			}
			// The node's block exists; the next allocations take its
			// FIFO's head, each in one write of node-a's object.
			if _, err := other.Allocate(ctx, req("seed")); err != nil {
				t.Fatal(err)
			}
			a := allocator.New(kvbacked.New(via), nil)

			// Applied, answer lost.
			p.dropNext(nil, nil)
			h1, err := a.Allocate(ctx, req("c1"))
			if err != nil {
				t.Fatalf("Allocate whose commit answer was lost: %v", err)
			}
			stored, ok, err := other.Handle(ctx, "node-a", h1.ID)
			if err != nil || !ok || len(stored.IPs) != 1 || stored.IPs[0].Addr != h1.IPs[0].Addr {
				t.Fatalf("Allocate returned %v, the store holds %+v (%v, %v)", h1.IPs, stored.IPs, ok, err)
			}

			// Lost to a concurrent allocation, answer lost.
			var racer ipam.Handle
			p.dropNext(func() {
				var err error
				if racer, err = other.Allocate(ctx, req("racer")); err != nil {
					t.Errorf("racing allocation: %v", err)
				}
			}, nil)
			h2, err := a.Allocate(ctx, req("c2"))
			if err != nil {
				t.Fatalf("Allocate that lost a race, answer lost: %v", err)
			}
			if len(racer.IPs) != 1 || h2.IPs[0].Addr == racer.IPs[0].Addr {
				t.Fatalf("c2 was handed %v, racer holds %v", h2.IPs, racer.IPs)
			}
			stored, ok, err = other.Handle(ctx, "node-a", h2.ID)
			if err != nil || !ok || stored.IPs[0].Addr != h2.IPs[0].Addr {
				t.Fatalf("Allocate returned %v, the store holds %+v (%v, %v)", h2.IPs, stored.IPs, ok, err)
			}

			// A release whose answer is lost.
			p.dropNext(nil, nil)
			if _, err := a.Release(ctx, "node-a", h1.ID); err != nil {
				t.Fatalf("Release whose answer was lost: %v", err)
			}
			if _, ok, err := other.Handle(ctx, "node-a", h1.ID); err != nil || ok {
				t.Fatalf("released handle still there: %v %v", ok, err)
			}
			if n := p.droppedCount(); n != 3 {
				t.Fatalf("the proxy dropped %d answers, want 3: the test tested nothing", n)
			}
			rep, err := consistency.CheckStore(ctx, typed)
			if err != nil {
				t.Fatal(err)
			}
			if err := rep.Err(); err != nil {
				t.Fatal(err)
			}
			if rep.Counts.Handles != 3 || rep.Counts.Allocated != 3 {
				t.Fatalf("store holds %d handles, %d addresses; want seed, racer, c2", rep.Counts.Handles, rep.Counts.Allocated)
			}
		})
	}
}
