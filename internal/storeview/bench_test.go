package storeview_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked/kvbackedtest"
	"github.com/ipkeeper/ipkeeper/internal/storeview"
)

// BenchmarkPassReads measures what a controller pass reads of etcd to
// learn the store's state, at 500 nodes x 110 dual-stack pods (50 nodes
// with -short), idle and with 10 allocations changed between passes:
// "list" is a pass's three lists (allocator.Observe, the controller's
// reads on a store it cannot watch), "view" a followed view brought up to
// date (View.Refresh: a progress request on its watch) and its snapshot
// taken. It reports the kv requests and the bytes etcd sent per pass
// (for the view, those its watch sent while the changes were made too).
func BenchmarkPassReads(b *testing.B) {
	nodes := 500
	if testing.Short() {
		nodes = 50
	}
	srv := etcdtest.ForTest(b, nil)
	prox := &countingProxy{target: strings.TrimPrefix(srv.Endpoint, "http://")}
	prox.start(b)
	ctx := context.Background()
	open := func(via string) (*kvbacked.Store, *kvbackedtest.Counting) {
		kvs, err := etcd.Open(ctx, etcd.Config{Endpoints: []string{via}, Prefix: "/bench/"})
		if err != nil {
			b.Fatal(err)
		}
		c := &kvbackedtest.Counting{Store: kvs}
		b.Cleanup(func() { _ = kvs.Close() })
		return kvbacked.New(kvs), c
	}
	direct, _ := open(srv.Endpoint)
	start := time.Now()
	populate(b, direct, nodes, 110)
	b.Logf("%d nodes x 110 dual-stack pods written in %v", nodes, time.Since(start))
	churn := func(i int) {
		a := allocator.New(direct, nil)
		for j := range 10 {
			node := fmt.Sprintf("node-%04d", (i*10+j)%nodes)
			h, err := a.Allocate(ctx, allocator.Request{Handle: ipam.Handle{ID: fmt.Sprintf("bench.churn-%d-%d.eth0", i, j),
				Network: "bench", ContainerID: fmt.Sprintf("churn-%d-%d", i, j), IfName: "eth0", Node: node},
				Sets: [][]string{{"v4"}, {"v6"}}})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := a.Release(ctx, node, h.ID); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, changes := range []bool{false, true} {
		name := "idle"
		if changes {
			name = "10changes"
		}
		b.Run("list/"+name, func(b *testing.B) {
			kvs, err := etcd.Open(ctx, etcd.Config{Endpoints: []string{"http://" + prox.addr()}, Prefix: "/bench/"})
			if err != nil {
				b.Fatal(err)
			}
			defer kvs.Close()
			counted := &kvbackedtest.Counting{Store: kvs}
			a := allocator.New(kvbacked.New(counted), nil)
			i := 0
			var bytes int64
			var reads int
			for b.Loop() {
				b.StopTimer()
				if changes {
					churn(i)
				}
				i++
				counted.Reset()
				before := prox.down.Load()
				b.StartTimer()
				snap, err := a.Observe(ctx)
				if err != nil || len(snap.Handles) < nodes*110 {
					b.Fatalf("Observe: %d handles, %v", len(snap.Handles), err)
				}
				b.StopTimer()
				bytes += prox.down.Load() - before
				g, l, _ := counted.Counts()
				reads += g + l
				b.StartTimer()
			}
			b.ReportMetric(float64(reads)/float64(i), "reads/pass")
			b.ReportMetric(float64(bytes)/float64(i), "bytes/pass")
		})
		b.Run("view/"+name, func(b *testing.B) {
			st, _ := open("http://" + prox.addr())
			src, ok := st.Follower()
			if !ok {
				b.Fatal("no Follower")
			}
			v := storeview.New(src, nil)
			vctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); v.Run(vctx) }()
			defer func() { cancel(); <-done }()
			wctx, wcancel := context.WithTimeout(ctx, time.Minute)
			v.WaitSynced(wctx)
			wcancel()
			i := 0
			var bytes int64
			for b.Loop() {
				b.StopTimer()
				// The watch brings the changes while they are made.
				before := prox.down.Load()
				if changes {
					churn(i)
				}
				i++
				b.StartTimer()
				if err := v.Refresh(ctx); err != nil {
					b.Fatal(err)
				}
				snap := v.Snapshot()
				if len(snap.Nodes) < nodes {
					b.Fatalf("the view holds %d nodes", len(snap.Nodes))
				}
				b.StopTimer()
				bytes += prox.down.Load() - before
				b.StartTimer()
			}
			if v.Lists() != 1 {
				b.Errorf("the view listed %d times", v.Lists())
			}
			b.ReportMetric(0, "reads/pass")
			b.ReportMetric(float64(bytes)/float64(i), "bytes/pass")
		})
	}
}

// populate writes nodes node objects of pods dual-stack handles each,
// with their claims, straight into st.
func populate(tb testing.TB, st store.Store, nodes, pods int) {
	tb.Helper()
	ctx := context.Background()
	p4 := ipam.Pool{Name: "v4", CIDR: netip.MustParsePrefix("10.0.0.0/12"), BlockSize: 26}
	p6 := ipam.Pool{Name: "v6", CIDR: netip.MustParsePrefix("fd00:b::/64"), BlockSize: 122}
	for _, p := range []ipam.Pool{p4, p6} {
		if _, err := st.CreatePool(ctx, store.Pool{Spec: p}); err != nil {
			tb.Fatal(err)
		}
	}
	created := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	idx := map[string]uint64{}
	for nd := range nodes {
		node := fmt.Sprintf("node-%04d", nd)
		obj := store.Node{Name: node}
		handles := make([]ipam.Handle, pods)
		for _, p := range []ipam.Pool{p4, p6} {
			first, _ := p.BlockSpan()
			n := 0
			for n < pods {
				cidr := p.BlockAt(first + idx[p.Name])
				idx[p.Name]++
				if _, err := st.CreateClaim(ctx, store.Claim{BlockRef: store.BlockRef{Pool: p.Name, CIDR: cidr}, Node: node}); err != nil {
					tb.Fatal(err)
				}
				blk := ipam.NewBlock(p, cidr, node)
				for ; n < pods; n++ {
					id := fmt.Sprintf("bench.%s-%d.eth0", node, n)
					next, addr, err := blk.Assign(p, id)
					if err != nil {
						break
					}
					blk = next
					h := &handles[n]
					if h.ID == "" {
						*h = ipam.Handle{ID: id, Network: "bench", ContainerID: fmt.Sprintf("%s-%d", node, n), IfName: "eth0",
							Node: node, Namespace: "default", Pod: fmt.Sprintf("pod-%d", n), Created: created}
					}
					h.IPs = append(h.IPs, ipam.HandleIP{Addr: addr, Pool: p.Name, Block: cidr})
				}
				obj.Blocks = append(obj.Blocks, blk)
			}
		}
		obj.Handles = handles
		if _, err := st.CreateNode(ctx, obj); err != nil {
			tb.Fatal(err)
		}
	}
}

// countingProxy forwards TCP connections to target, counting the bytes
// sent back (down).
type countingProxy struct {
	target string
	l      net.Listener
	down   atomic.Int64
}

func (p *countingProxy) start(tb testing.TB) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p.l = l
	tb.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			go func() { _, _ = io.Copy(u, c); u.Close() }()
			go func() { _, _ = io.Copy(countingWriter{c, &p.down}, u); c.Close() }()
		}
	}()
}

func (p *countingProxy) addr() string { return p.l.Addr().String() }

type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n.Add(int64(n))
	return n, err
}
