package webui

import (
	"fmt"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
)

// scaleModel is a model of nodes nodes with pods handles each, in
// /26 blocks of one /12 pool: the shape of the scale benchmark
// (test/bench/webui), built in memory.
func scaleModel(tb testing.TB, nodes, pods int) *model {
	tb.Helper()
	pool := ipam.Pool{Name: "scale", CIDR: netip.MustParsePrefix("10.0.0.0/12"), BlockSize: 26}
	es := []kv.KeyValue{{Key: allocator.PoolKey(pool.Name), Value: allocator.Encode(pool), Version: 1}}
	first, _ := pool.BlockSpan()
	created := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	idx := first
	for nd := range nodes {
		node := fmt.Sprintf("node-%05d", nd)
		n := 0
		for n < pods {
			cidr := pool.BlockAt(idx)
			idx++
			blk := ipam.NewBlock(pool, cidr, node)
			for ; n < pods; n++ {
				id := fmt.Sprintf("bench.%s-%d.eth0", node, n)
				next, addr, err := blk.Assign(pool, id)
				if err != nil {
					break
				}
				blk = next
				h := ipam.Handle{ID: id, Network: "bench", ContainerID: fmt.Sprintf("%s-%d", node, n), IfName: "eth0",
					Node: node, Namespace: "default", Pod: fmt.Sprintf("pod-%d", n), Created: created,
					IPs: []ipam.HandleIP{{Addr: addr, Pool: pool.Name, Block: cidr}}}
				es = append(es, kv.KeyValue{Key: allocator.HandleKey(id), Value: allocator.Encode(h), Version: 1})
			}
			es = append(es, kv.KeyValue{Key: allocator.BlockKey(pool.Name, cidr), Value: allocator.Encode(blk), Version: 1})
		}
	}
	m := newModel(slog.New(slog.DiscardHandler))
	m.replace(1, es)
	return m
}

// BenchmarkSearchScale measures /api/search's work over 5 000 nodes x 110
// pods (1 000 nodes with -short): a node, a pod name that matches one pod
// per node and ten more, and a miss, on an unchanged datastore; a search
// after a handle changed; and one that builds the search index.
func BenchmarkSearchScale(b *testing.B) {
	nodes := 5000
	if testing.Short() {
		nodes = 1000
	}
	m := scaleModel(b, nodes, 110)
	for _, q := range []string{"node-02500", "pod-17", "no-such-thing"} {
		b.Run(q, func(b *testing.B) {
			for b.Loop() {
				m.mu.RLock()
				_ = m.search(q)
				m.mu.RUnlock()
			}
		})
	}
	// A handle written again since the index was built is looked at
	// aside; a new index is built after many such changes (or for the
	// first search).
	var key string
	for k := range m.handles {
		key = k
		break
	}
	h := m.handles[key]
	value := allocator.Encode(ipam.Handle{ID: h.id, Node: h.node, Namespace: h.namespace, Pod: h.pod,
		ContainerID: h.containerID, IfName: h.ifName, Created: h.created, IPs: h.ips})
	version := int64(1)
	b.Run("pod-17 after a change", func(b *testing.B) {
		for b.Loop() {
			version++
			m.apply(version, []change{{key: key, value: value, version: version}})
			m.mu.RLock()
			_ = m.search("pod-17")
			m.mu.RUnlock()
		}
	})
	b.Run("pod-17 building the index", func(b *testing.B) {
		for b.Loop() {
			m.mu.Lock()
			m.idx = nil
			m.mu.Unlock()
			m.mu.RLock()
			_ = m.search("pod-17")
			m.mu.RUnlock()
		}
	})
}

// BenchmarkHandlesScale measures UI.Handles (what the controller's leak
// source reads instead of the datastore) over 5 000 nodes x 110 pods
// (1 000 nodes with -short).
func BenchmarkHandlesScale(b *testing.B) {
	nodes := 5000
	if testing.Short() {
		nodes = 1000
	}
	u := &UI{m: scaleModel(b, nodes, 110)}
	for b.Loop() {
		hs, _, _ := u.Handles()
		if len(hs) != nodes*110 {
			b.Fatalf("%d handles", len(hs))
		}
	}
}
