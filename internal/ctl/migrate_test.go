package ctl

import (
	"encoding/json"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store/local"
)

// The bbolt file the first layout's allocator wrote, and what that
// allocator reported about it (internal/store/kvbacked/migrate/testdata/README.md).
const (
	firstLayoutDB   = "../store/kvbacked/migrate/testdata/firstlayout.db"
	firstLayoutWant = "../store/kvbacked/migrate/testdata/firstlayout.db.want.json"
)

// firstLayoutState is firstlayout.db.want.json: the handles and blocks the
// first-layout allocator reported.
type firstLayoutState struct {
	Handles []struct {
		ID          string    `json:"id"`
		Network     string    `json:"network"`
		ContainerID string    `json:"containerID"`
		IfName      string    `json:"ifname"`
		Node        string    `json:"node"`
		NetNS       string    `json:"netns"`
		Namespace   string    `json:"namespace"`
		Pod         string    `json:"pod"`
		Created     time.Time `json:"created"`
		IPs         []struct {
			Addr  netip.Addr   `json:"addr"`
			Pool  string       `json:"pool"`
			Block netip.Prefix `json:"block"`
		} `json:"ips"`
	} `json:"handles"`
	Blocks []struct {
		CIDR   netip.Prefix      `json:"cidr"`
		Pool   string            `json:"pool"`
		Node   string            `json:"node"`
		Owners map[string]string `json:"owners"`
	} `json:"blocks"`
}

// TestFirstLayoutStoreShowsSameAllocations: ipkeeperctl opening a local
// store written by the first-layout allocator (migrated on open) shows
// every allocation that allocator reported — the same handle, node, pod,
// namespace and time for every address, the same owners in every block
// (borrowed addresses, a dual-stack handle split over two nodes, a legacy
// handle ID and a whereabouts allocation without a node among them), the
// same per-pool and per-node counts — and check finds nothing.
func TestFirstLayoutStoreShowsSameAllocations(t *testing.T) {
	h := newHarness(t)
	db, err := os.ReadFile(firstLayoutDB)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.dir, local.FileName), db, 0o600); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(firstLayoutWant)
	if err != nil {
		t.Fatal(err)
	}
	var want firstLayoutState
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if len(want.Handles) == 0 || len(want.Blocks) == 0 {
		t.Fatalf("%s holds no handles or blocks", firstLayoutWant)
	}

	// The migration stores a handle the first layout kept under the
	// legacy form of its ID under the canonical one, which the pod's DEL
	// names (ipam.CanonicalID).
	canonical := map[string]string{}
	for _, wh := range want.Handles {
		canonical[wh.ID] = wh.ID
		if id, ok := ipam.CanonicalID(ipam.Handle{ID: wh.ID, Network: wh.Network, ContainerID: wh.ContainerID, IfName: wh.IfName}); ok {
			canonical[wh.ID] = id
		}
	}
	if len(canonical) != len(want.Handles) {
		t.Fatalf("%s lists a handle twice", firstLayoutWant)
	}
	addrs := 0
	perPool, perNode := map[string]uint64{}, map[string]int{}
	for _, wh := range want.Handles {
		wantID := canonical[wh.ID]
		for _, ip := range wh.IPs {
			addrs++
			perPool[ip.Pool]++
			perNode[wh.Node]++
			var v ipView
			if err := json.Unmarshal([]byte(h.ok("ip", "show", ip.Addr.String(), "--pool", ip.Pool, "-o", "json")), &v); err != nil {
				t.Fatal(err)
			}
			if len(v.Holdings) != 1 {
				t.Fatalf("ip show %s: %+v", ip.Addr, v)
			}
			got := v.Holdings[0]
			if got.State != stateAllocated || got.HandleID != wantID || got.Block != ip.Block.String() || got.Handle == nil {
				t.Fatalf("ip show %s: %+v, want held by %s in block %s", ip.Addr, got, wantID, ip.Block)
			}
			if r := got.Handle; r.Node != wh.Node || r.NetNS != wh.NetNS || r.Namespace != wh.Namespace || r.Pod != wh.Pod || !r.Created.Equal(wh.Created) {
				t.Errorf("ip show %s: record %+v, the first layout had node %q netns %q pod %s/%s created %v",
					ip.Addr, *r, wh.Node, wh.NetNS, wh.Namespace, wh.Pod, wh.Created)
			}
		}
	}

	blocks := 0
	for _, wb := range want.Blocks {
		var v blocksView
		if err := json.Unmarshal([]byte(h.ok("block", "show", wb.CIDR.String(), "--pool", wb.Pool, "-o", "json")), &v); err != nil {
			t.Fatal(err)
		}
		if wb.Node == "" && len(wb.Owners) == 0 && len(v.Blocks) == 0 {
			// An empty block of no node (imported from whereabouts): the
			// migration leaves it unclaimed, free as a whole, as it was.
			var ip ipView
			if err := json.Unmarshal([]byte(h.ok("ip", "show", wb.CIDR.Addr().Next().String(), "--pool", wb.Pool, "-o", "json")), &ip); err != nil ||
				ip.Holdings[0].State != stateUnclaimed {
				t.Errorf("an address of the empty unaffine block %s: %+v %v", wb.CIDR, ip, err)
			}
			continue
		}
		blocks++
		if len(v.Blocks) != 1 {
			t.Fatalf("block show %s/%s: %+v", wb.Pool, wb.CIDR, v)
		}
		b := v.Blocks[0]
		wantOwners := map[string]string{}
		for ord, id := range wb.Owners {
			n, err := strconv.Atoi(ord)
			if err != nil {
				t.Fatal(err)
			}
			wantOwners[addrAt(wb.CIDR, n).String()] = canonical[id]
		}
		gotOwners := map[string]string{}
		for _, al := range b.Allocations {
			gotOwners[al.Addr] = al.Handle
			if al.NoRecord {
				t.Errorf("block %s: %s has no handle record", wb.CIDR, al.Addr)
			}
		}
		if b.Node != wb.Node || b.InUse != len(wb.Owners) || !maps.Equal(gotOwners, wantOwners) {
			t.Errorf("block show %s/%s: node %q, %d in use, owners %v; the first layout had node %q, owners %v",
				wb.Pool, wb.CIDR, b.Node, b.InUse, gotOwners, wb.Node, wantOwners)
		}
	}

	var s showView
	if err := json.Unmarshal([]byte(h.ok("show", "--blocks", "--nodes", "-o", "json")), &s); err != nil {
		t.Fatal(err)
	}
	gotPool := map[string]uint64{}
	for _, p := range s.Pools {
		gotPool[p.Name] = p.InUse
	}
	gotNode := map[string]int{}
	for _, n := range s.Nodes {
		gotNode[n.Node] = n.InUse
	}
	if !maps.Equal(gotPool, perPool) || !maps.Equal(gotNode, perNode) || len(s.Blocks) != blocks {
		t.Errorf("show: pools in use %v, nodes %v, %d blocks; the first layout had %v, %v, %d claimed or non-empty blocks",
			gotPool, gotNode, len(s.Blocks), perPool, perNode, blocks)
	}
	var c checkView
	if err := json.Unmarshal([]byte(h.ok("check", "-o", "json")), &c); err != nil || c.Counts.Allocated != addrs {
		t.Fatalf("check: %+v %v; want %d allocated addresses", c, err, addrs)
	}
	if pools := slices.Sorted(maps.Keys(perPool)); len(pools) < 3 {
		t.Fatalf("the fixture exercises only pools %v", pools)
	}
}

// addrAt is the address at ordinal n of block cidr.
func addrAt(cidr netip.Prefix, n int) netip.Addr {
	a := cidr.Addr()
	for range n {
		a = a.Next()
	}
	return a
}
