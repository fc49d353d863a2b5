package webui

import (
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
)

// scaleModel is a model of nodes nodes with pods handles each, in
// /26 blocks of one /12 pool: the shape of the scale benchmark
// (test/bench/webui), built in memory.
func scaleModel(tb testing.TB, nodes, pods int) *model {
	tb.Helper()
	m := newModel(slog.New(slog.DiscardHandler))
	m.replace(scaleModelSnapshot(tb, nodes, pods))
	return m
}

// scaleModelSnapshot is scaleModel's full read.
func scaleModelSnapshot(tb testing.TB, nodes, pods int) snapshot {
	tb.Helper()
	pool := ipam.Pool{Name: "scale", CIDR: netip.MustParsePrefix("10.0.0.0/12"), BlockSize: 26}
	snap := snapshot{rev: 1, pools: []store.Pool{{Spec: pool, Version: "1"}}}
	first, _ := pool.BlockSpan()
	created := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	idx := first
	for nd := range nodes {
		node := fmt.Sprintf("node-%05d", nd)
		obj := store.Node{Name: node, Version: "1"}
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
				obj.Handles = append(obj.Handles, ipam.Handle{ID: id, Network: "bench", ContainerID: fmt.Sprintf("%s-%d", node, n),
					IfName: "eth0", Node: node, Namespace: "default", Pod: fmt.Sprintf("pod-%d", n), Created: created,
					IPs: []ipam.HandleIP{{Addr: addr, Pool: pool.Name, Block: cidr}}})
			}
			obj.Blocks = append(obj.Blocks, blk)
			snap.claims = append(snap.claims, store.Claim{BlockRef: store.BlockRef{Pool: pool.Name, CIDR: cidr}, Node: node, Version: "1"})
		}
		snap.nodes = append(snap.nodes, kvbacked.ScannedNode{Name: node, Version: obj.Version, Node: obj, Decoded: true})
	}
	return snap
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
	// One handle's node object written again, the handle changed.
	var h *handleState
	for _, x := range m.handles {
		h = x
		break
	}
	f := newNodeFeed(m)
	f.rev = 1
	f.objs[h.node] = map[string]ipam.Handle{}
	for _, x := range m.handles {
		if x.node == h.node {
			f.objs[h.node][x.id] = *x.rec()
		}
	}
	b.Run("pod-17 after a change", func(b *testing.B) {
		for b.Loop() {
			r := f.objs[h.node][h.id]
			r.Created = r.Created.Add(time.Second)
			f.put(h.node, r)
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

// BenchmarkFirstLoadScale measures the map's first full load of 5 000
// nodes x 110 pods (1 000 with -short) from objects already decoded (the
// view's snapshot): the model built from nothing. It reports the heap the
// model keeps per address (retained-B/addr).
func BenchmarkFirstLoadScale(b *testing.B) {
	nodes := 5000
	if testing.Short() {
		nodes = 1000
	}
	snap := scaleModelSnapshot(b, nodes, 110)
	addrs := nodes * 110
	var kept float64
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		m := newModel(slog.New(slog.DiscardHandler))
		m.replace(snap)
		b.StopTimer()
		waitIndex(m)
		runtime.GC()
		runtime.ReadMemStats(&after)
		kept = float64(after.HeapAlloc) - float64(before.HeapAlloc)
		runtime.KeepAlive(m)
		b.StartTimer()
	}
	b.ReportMetric(kept/float64(addrs), "retained-B/addr")
}

// waitIndex waits until no search index is being built in the background.
func waitIndex(m *model) {
	m.idxMu.Lock()
	for m.idxBuilding {
		m.idxMu.Unlock()
		time.Sleep(time.Millisecond)
		m.idxMu.Lock()
	}
	m.idxMu.Unlock()
}
