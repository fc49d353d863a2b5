package kube

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// BenchmarkAddDensity measures a dual-stack ADD's write (one UpdateNode)
// on the test API server on nodes already holding 10 to 2 000 dual-stack
// pods: the bytes of the request bodies it sends (written-B/add), its
// write requests (writes/add), the median time of one (p50-ns/add), and
// the size of the objects it wrote as the API server then stores them
// in its etcd (stored-B/add: each written object GET back whole, JSON,
// managedFields included, as the API server encodes a custom resource).
// The DEL that keeps the node's size steady is not timed; its bodies and
// requests are reported as written-B/del and writes/del.
//
//	IPKEEPER_KUBE_APISERVER=$(scripts/kube-apiserver.sh) \
//	  go test -run '^$' -bench AddDensity -benchtime 100x ./internal/store/kube/
func BenchmarkAddDensity(b *testing.B) {
	ctx := context.Background()
	for _, pods := range []int{10, 100, 500, 2000} {
		b.Run(fmt.Sprintf("pods=%d", pods), func(b *testing.B) {
			st, bodies := openCounting(b)
			n, err := st.CreateNode(ctx, store.Node{Name: "node-a"})
			if err != nil {
				b.Fatal(err)
			}
			for i := 0; i < pods; i += 25 {
				next := cloneBench(n)
				for j := i; j < min(i+25, pods); j++ {
					benchAdd(b, st, &next, fmt.Sprintf("resident-%04d", j))
				}
				if n, err = st.UpdateNode(ctx, next); err != nil {
					b.Fatal(err)
				}
			}
			var bytes, writes, delBytes, delWrites, adds, stored int64
			var took []time.Duration
			i := 0
			for b.Loop() {
				b.StopTimer()
				id := fmt.Sprintf("bench-%d", i)
				i++
				next := cloneBench(n)
				benchAdd(b, st, &next, id)
				bodies.take()
				bodies.takePaths()
				b.StartTimer()
				start := time.Now()
				if n, err = st.UpdateNode(ctx, next); err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
				b.StopTimer()
				w, by := bodies.take()
				writes, bytes, adds = writes+w, bytes+by, adds+1
				stored += storedBytes(b, st, bodies.takePaths())
				next = cloneBench(n)
				benchDrop(b, &next, ipam.HandleID("k8s-pod-network", id, "eth0"))
				if n, err = st.UpdateNode(ctx, next); err != nil {
					b.Fatal(err)
				}
				w, by = bodies.take()
				bodies.takePaths()
				delWrites, delBytes = delWrites+w, delBytes+by
				b.StartTimer()
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "p50-ns/add")
			b.ReportMetric(float64(stored)/float64(adds), "stored-B/add")
			b.ReportMetric(float64(bytes)/float64(adds), "written-B/add")
			b.ReportMetric(float64(writes)/float64(adds), "writes/add")
			b.ReportMetric(float64(delBytes)/float64(adds), "written-B/del")
			b.ReportMetric(float64(delWrites)/float64(adds), "writes/del")
		})
	}
}

// bodyCounter counts the write requests (POST, PUT, PATCH, DELETE) a
// store sends and their bodies' bytes, and keeps the paths of the objects
// PUT or PATCHed.
type bodyCounter struct {
	next          http.RoundTripper
	writes, bytes atomic.Int64
	mu            sync.Mutex
	paths         []string
}

func (c *bodyCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet {
		c.writes.Add(1)
		c.bytes.Add(max(req.ContentLength, 0))
	}
	if req.Method == http.MethodPut || req.Method == http.MethodPatch {
		c.mu.Lock()
		c.paths = append(c.paths, req.URL.Path)
		c.mu.Unlock()
	}
	return c.next.RoundTrip(req)
}

// takePaths returns the paths PUT or PATCHed since the last takePaths.
func (c *bodyCounter) takePaths() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.paths
	c.paths = nil
	return p
}

// storedBytes GETs each object of paths and returns the sum of their
// sizes as the API server answers them (JSON, managedFields included).
func storedBytes(b *testing.B, st *Store, paths []string) int64 {
	var sum int64
	for _, p := range paths {
		raw, err := st.rc.Get().AbsPath(p).DoRaw(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		sum += int64(len(raw))
	}
	return sum
}

// take returns the writes and bytes counted since the last take.
func (c *bodyCounter) take() (writes, bytes int64) {
	return c.writes.Swap(0), c.bytes.Swap(0)
}

func openCounting(b *testing.B) (*Store, *bodyCounter) {
	s := kubetest.Require(b, srv)
	c := &bodyCounter{}
	cfg := rest.CopyConfig(s.Config)
	cfg.QPS, cfg.Burst = 1000, 1000
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { c.next = rt; return c }
	st, err := NewForConfig(cfg, "d"+strconv.FormatInt(partitions.Add(1), 10))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return st, c
}

var (
	benchPool4 = ipam.Pool{Name: "bench4", CIDR: netip.MustParsePrefix("10.64.0.0/16"), BlockSize: 26}
	benchPool6 = ipam.Pool{Name: "bench6", CIDR: netip.MustParsePrefix("fd00:64::/64"), BlockSize: 122}
)

// benchAdd gives n a dual-stack handle of container id, as the plugin
// records one, from the first free address of each family's last block,
// claiming (for n's node) and adding the next block when it is full.
func benchAdd(b *testing.B, st *Store, n *store.Node, id string) {
	h := ipam.Handle{ID: ipam.HandleID("k8s-pod-network", id, "eth0"), Network: "k8s-pod-network", ContainerID: id, IfName: "eth0",
		Node: n.Name, NetNS: "/var/run/netns/cni-6f1c2d1e-8a7b-4c3d-9e0f-" + fmt.Sprintf("%012d", len(n.Handles)),
		Namespace: "default", Pod: "web-" + id, PodUID: "7c1d6f2a-1b3c-4d5e-8f90-" + fmt.Sprintf("%012d", len(n.Handles)),
		Created: time.Date(2026, 11, 27, 3, 20, 0, 0, time.UTC)}
	for _, p := range []ipam.Pool{benchPool4, benchPool6} {
		last, held := -1, uint64(0)
		for i, bl := range n.Blocks {
			if bl.Pool == p.Name {
				last, held = i, held+1
			}
		}
		if last >= 0 {
			if nb, a, err := n.Blocks[last].Assign(p, h.ID); err == nil {
				n.Blocks[last] = nb
				h.IPs = append(h.IPs, ipam.HandleIP{Addr: a, Pool: p.Name, Block: nb.CIDR})
				continue
			}
		}
		cidr := p.BlockAt(held)
		_, err := st.CreateClaim(context.Background(), store.Claim{BlockRef: store.BlockRef{Pool: p.Name, CIDR: cidr}, Node: n.Name})
		if err != nil && !errors.Is(err, store.ErrExists) {
			b.Fatal(err)
		}
		nb, a, err := ipam.NewBlock(p, cidr, n.Name).Assign(p, h.ID)
		if err != nil {
			b.Fatal(err)
		}
		n.Blocks = append(n.Blocks, nb)
		h.IPs = append(h.IPs, ipam.HandleIP{Addr: a, Pool: p.Name, Block: cidr})
	}
	n.Handles = append(n.Handles, h)
}

// benchDrop releases handle id's addresses in n and drops its record.
func benchDrop(b *testing.B, n *store.Node, id string) {
	h, ok := n.Handle(id)
	if !ok {
		b.Fatalf("no handle %q", id)
	}
	for _, ip := range h.IPs {
		for i, bl := range n.Blocks {
			if bl.Pool == ip.Pool && bl.CIDR == ip.Block {
				nb, err := bl.Release(ip.Addr, id)
				if err != nil {
					b.Fatal(err)
				}
				n.Blocks[i] = nb
			}
		}
	}
	n.Handles = slices.DeleteFunc(slices.Clone(n.Handles), func(h ipam.Handle) bool { return h.ID == id })
}

// cloneBench copies n's slices (blocks are replaced, never changed in
// place).
func cloneBench(n store.Node) store.Node {
	n.Blocks = slices.Clone(n.Blocks)
	n.Handles = slices.Clone(n.Handles)
	n.Loans = slices.Clone(n.Loans)
	return n
}
