package webui

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// TestSearchIndexFollowsChanges searches by pod after the search index was
// built and handles were then added, replaced, renamed and deleted (IPv4
// and IPv6 side by side), and again after enough changes that the index is
// built anew: every answer lists exactly the current handles, once each.
func TestSearchIndexFollowsChanges(t *testing.T) {
	for _, f := range []struct {
		name string
		pool ipam.Pool
	}{{"IPv4", poolV4}, {"IPv6", poolV6}} {
		t.Run(f.name, func(t *testing.T) {
			m := newModel(slog.New(slog.DiscardHandler))
			feed := newNodeFeed(m)
			put := func(pod, node string, ord int) {
				t.Helper()
				blk, _ := f.pool.CIDR.Addr().Prefix(f.pool.BlockSize)
				addr := ipam.Block{CIDR: blk}.Addr(ord)
				h := ipam.Handle{ID: "net.ctr-" + pod + ".eth0", Node: node, Namespace: "default", Pod: pod, ContainerID: "ctr-" + pod,
					IPs: []ipam.HandleIP{{Addr: addr, Pool: f.pool.Name, Block: blk}}}
				feed.put(node, h)
			}
			del := func(pod string) { feed.del("net.ctr-" + pod + ".eth0") }
			search := func(q string) string {
				m.mu.RLock()
				defer m.mu.RUnlock()
				var out []string
				for _, r := range m.search(q).Results {
					out = append(out, fmt.Sprintf("%s %s %s", r.Kind, r.Addr, r.Node))
				}
				return strings.Join(out, "; ")
			}
			blk, _ := f.pool.CIDR.Addr().Prefix(f.pool.BlockSize)
			addr := func(ord int) netip.Addr { return ipam.Block{CIDR: blk}.Addr(ord) }

			put("web-1", "node-a", 1)
			put("web-2", "node-a", 2)
			put("Web-Upper", "node-a", 9)
			if got, want := search("web-1"), fmt.Sprintf("pod %s node-a", addr(1)); got != want {
				t.Fatalf("before any change: %q, want %q", got, want)
			}
			if indexOf(m) == nil {
				t.Fatal("the first search built no index")
			}
			put("web-3", "node-b", 3) // added
			put("web-1", "node-c", 4) // replaced: moved node and address
			del("web-2")              // deleted
			put("db-1", "node-a", 5)  // does not match
			for _, c := range []struct{ q, want string }{
				{"web-1", fmt.Sprintf("pod %s node-c", addr(4))},
				{"web-2", ""},
				{"web-3", fmt.Sprintf("pod %s node-b", addr(3))},
				{"WEB-UP", fmt.Sprintf("pod %s node-a", addr(9))},
				{"default/web-3", fmt.Sprintf("pod %s node-b", addr(3))},
				{"ctr-db", fmt.Sprintf("handle %s node-a", addr(5))},
			} {
				if got := search(c.q); got != c.want {
					t.Errorf("search %q after changes: %q, want %q", c.q, got, c.want)
				}
			}
			if got := search("web"); strings.Count(got, "pod ") != 3 || strings.Contains(got, addr(2).String()) {
				t.Errorf("search web: %q, want web-1, web-3 and Web-Upper once each", got)
			}
			// Enough changes that the next search has the index built
			// again (in the background; its answer is right all the same).
			// A build started earlier (after the first read) may still be
			// under way; it would take the index's place in the middle of
			// the puts below.
			for i := 0; building(m); i++ {
				if i == 3000 {
					t.Fatal("a background build of the index does not end")
				}
				time.Sleep(10 * time.Millisecond)
			}
			old := indexOf(m)
			for i := range rebuildAfter + 1 {
				put(fmt.Sprintf("bulk-%d", i), "node-d", 10+i%50)
			}
			del("web-3")
			if got := search("web-3"); got != "" {
				t.Errorf("search web-3 after deleting it: %q", got)
			}
			for i := 0; indexOf(m) == old; i++ {
				if i == 3000 {
					t.Fatalf("the index was not built again after %d changes", rebuildAfter+2)
				}
				time.Sleep(10 * time.Millisecond)
			}
			m.idxMu.Lock()
			added := len(m.idxAdded)
			m.idxMu.Unlock()
			if added != 0 {
				t.Errorf("the new index leaves %d handles aside", added)
			}
			if got := search("bulk-1000"); got != fmt.Sprintf("pod %s node-d", addr(10+1000%50)) {
				t.Errorf("search bulk-1000 in the new index: %q", got)
			}
			if got := search("web-1"); got != fmt.Sprintf("pod %s node-c", addr(4)) {
				t.Errorf("search web-1 in the new index: %q", got)
			}
		})
	}
}

// building reports whether an index is being built in the background.
func building(m *model) bool {
	m.idxMu.Lock()
	defer m.idxMu.Unlock()
	return m.idxBuilding
}

// indexOf returns m's search index (nil when none was built).
func indexOf(m *model) *handleIndex {
	m.idxMu.Lock()
	defer m.idxMu.Unlock()
	return m.idx
}

// TestSmallest checks the bounded selection search uses against sorting.
func TestSmallest(t *testing.T) {
	xs := []int{9, 3, 7, 1, 8, 2, 6, 5, 4, 0, 3}
	for k := range len(xs) + 2 {
		want := slices.Sorted(slices.Values(xs))[:min(k, len(xs))]
		got := smallest(slices.Clone(xs), k, func(a, b int) int { return a - b })
		if !slices.Equal(got, want) {
			t.Errorf("k=%d: %v, want %v", k, got, want)
		}
	}
}

// TestSearchIndexBuildDoesNotHoldTheMirror: while the index is built in
// the background the mirror takes changes (the build holds it only to
// take the handles), and a handle put meanwhile is found once the new
// index is in place.
func TestSearchIndexBuildDoesNotHoldTheMirror(t *testing.T) {
	m := newModel(slog.New(slog.DiscardHandler))
	feed := newNodeFeed(m)
	blk, _ := poolV4.CIDR.Addr().Prefix(poolV4.BlockSize)
	put := func(pod string, ord int) {
		feed.put("node-a", ipam.Handle{ID: "net.ctr-" + pod + ".eth0", Node: "node-a", Namespace: "default", Pod: pod,
			ContainerID: "ctr-" + pod, IPs: []ipam.HandleIP{{Addr: ipam.Block{CIDR: blk}.Addr(ord), Pool: poolV4.Name, Block: blk}}})
	}
	put("web-1", 1)
	taken, release := make(chan struct{}), make(chan struct{})
	indexTaken = func() { close(taken); <-release }
	defer func() { indexTaken = nil }()
	m.mu.Lock()
	m.idxMu.Lock()
	m.rebuildLocked()
	m.idxMu.Unlock()
	m.mu.Unlock()
	<-taken
	// The build is under way: a change goes through.
	put("late-1", 7)
	close(release)
	for i := 0; building(m); i++ {
		if i == 3000 {
			t.Fatal("the background build of the index does not end")
		}
		time.Sleep(10 * time.Millisecond)
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if indexOf(m) == nil {
		t.Fatal("no index after the build")
	}
	var got []string
	for _, r := range m.search("late-1").Results {
		got = append(got, r.Addr.String())
	}
	want := ipam.Block{CIDR: blk}.Addr(7).String()
	if !slices.Equal(got, []string{want}) {
		t.Errorf("search late-1, put while the index was built: %v, want %s", got, want)
	}
}
