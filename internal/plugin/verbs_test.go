package plugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/store/local"
)

// handles lists the handle IDs in the harness's store.
func (h *harness) handles() []string {
	h.t.Helper()
	s, err := datastore.Open(context.Background(), config.Datastore{Type: config.DatastoreLocal, Path: h.dir}, datastore.Options{})
	if err != nil {
		h.t.Fatal(err)
	}
	defer s.Close()
	hs, err := allocator.New(s, nil).Handles(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	var ids []string
	for _, x := range hs {
		ids = append(ids, x.ID)
	}
	slices.Sort(ids)
	return ids
}

// dump returns every key and value of the harness's store, or "" when the
// store was never created.
func (h *harness) dump() string {
	h.t.Helper()
	if _, err := os.Stat(filepath.Join(h.dir, "ipkeeper.db")); err != nil {
		return ""
	}
	s, err := local.Open(context.Background(), h.dir)
	if err != nil {
		h.t.Fatal(err)
	}
	defer s.Close()
	es, err := s.List(context.Background(), "")
	if err != nil {
		h.t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range es {
		fmt.Fprintf(&b, "%s@%d=%s\n", e.Key, e.Version, e.Value)
	}
	return b.String()
}

func TestGCReleasesOnlyInvalidAttachments(t *testing.T) {
	h := newHarness(t)
	stdin := h.conf("1.1.0", v4Ranges)
	for i := range 6 {
		if _, err := h.add(fmt.Sprintf("c%d", i), stdin); err != nil {
			t.Fatal(err)
		}
	}
	// Another network's handle on the same store must survive GC.
	otherNet := []byte(strings.Replace(string(stdin), `"name":"net1"`, `"name":"net2"`, 1))
	if _, err := h.add("c0", otherNet); err != nil {
		t.Fatal(err)
	}
	gc := h.conf("1.1.0", v4Ranges,
		`"cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"},{"containerID":"c4","ifname":"eth0"}]`)
	if err := h.p.GC(&skel.CmdArgs{StdinData: gc}); err != nil {
		t.Fatalf("GC: %v", err)
	}
	got := strings.Join(h.handles(), " ")
	want := "net1.c1.eth0 net1.c4.eth0 net2.c0.eth0"
	if got != want {
		t.Fatalf("after GC handles = %q, want %q", got, want)
	}
}

func TestExhaustionAndStatus(t *testing.T) {
	for _, tc := range []struct{ name, ipam string }{
		{"IPv4", `"ranges":[[{"subnet":"10.30.0.0/29"}]]`},  // .1 gateway, .2-.6 usable
		{"IPv6", `"ranges":[[{"subnet":"fd00:30::/125"}]]`}, // ::1 gateway, ::2-::7 usable
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			stdin := h.conf("1.1.0", tc.ipam)
			n := 0
			var err error
			for ; n < 20; n++ {
				if _, err = h.add(fmt.Sprintf("c%d", n), stdin); err != nil {
					break
				}
			}
			want := map[string]int{"IPv4": 5, "IPv6": 6}[tc.name]
			if n != want || cniCode(t, err) != CodePoolExhausted {
				t.Fatalf("%d ADDs succeeded, then %v; want %d then code 100", n, err, want)
			}
			before := h.dump()
			if _, err := h.add("late", stdin); err == nil {
				t.Fatal("ADD into full pool succeeded")
			}
			if h.dump() != before {
				t.Fatal("failed ADD changed the store")
			}
			// A full pool is the ADD's failure, not the node's: a failing
			// STATUS would make the kubelet stop tearing down the dead
			// sandboxes whose DELs free addresses.
			if err := h.p.Status(h.args("", stdin)); err != nil {
				t.Fatalf("STATUS on a full pool = %v, want success", err)
			}
			if err := h.p.Del(h.args("c0", stdin)); err != nil {
				t.Fatal(err)
			}
			if err := h.p.Status(h.args("", stdin)); err != nil {
				t.Fatalf("STATUS after DEL: %v", err)
			}
			if _, err := h.add("late", stdin); err != nil {
				t.Fatalf("ADD after DEL: %v", err)
			}
		})
	}
}

func TestDualStackAllOrNothing(t *testing.T) {
	h := newHarness(t)
	// The IPv6 range has exactly one usable address (::2; ::1 is the gateway).
	stdin := h.conf("1.0.0", `"ranges":[[{"subnet":"10.40.0.0/24"}],[{"subnet":"fd00:40::/126"}]]`)
	if _, err := h.add("c1", stdin); err != nil {
		t.Fatal(err)
	}
	if _, err := h.add("c2", stdin); err != nil {
		t.Fatal(err)
	}
	before := h.dump()
	_, err := h.add("c3", stdin)
	if err == nil || cniCode(t, err) != CodePoolExhausted {
		t.Fatalf("ADD with IPv6 exhausted = %v, want code 100", err)
	}
	if h.dump() != before {
		t.Fatal("a failed dual-stack ADD changed the store (an IPv4 address was taken?)")
	}
}

func TestRequestedAddress(t *testing.T) {
	h := newHarness(t)
	stdin := h.conf("1.0.0", v4Ranges)
	args := h.args("c1", stdin)
	args.Args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0;IP=10.20.0.77"
	h.out.Reset()
	if err := h.p.Add(args); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(h.out.String(), "10.20.0.77/24") {
		t.Fatalf("result %s lacks the requested address", h.out)
	}
	args = h.args("c2", stdin)
	args.Args = "IP=10.20.0.77"
	err := h.p.Add(args)
	if err == nil || cniCode(t, err) != CodeAddrUnavailable {
		t.Fatalf("ADD of a taken address = %v, want code 102", err)
	}
}

func TestBadInputLeavesStoreUntouched(t *testing.T) {
	cases := []struct {
		name  string
		ipam  string
		code  uint
		words string
	}{
		{"unknown datastore", `"datastore":{"type":"zookeeper"},"ranges":[[{"subnet":"10.50.0.0/24"}]]`, types.ErrInvalidNetworkConfig, "zookeeper"},
		{"invalid CIDR", `"ranges":[[{"subnet":"10.50.0.300/24"}]]`, types.ErrInvalidNetworkConfig, "10.50.0.300/24"},
		{"rangeStart outside", `"ranges":[[{"subnet":"10.50.0.0/24","rangeStart":"10.51.0.5"}]]`, types.ErrInvalidNetworkConfig, "rangeStart"},
		{"gateway outside", `"ranges":[[{"subnet":"fd00:50::/64","gateway":"fd00:51::1"}]]`, types.ErrInvalidNetworkConfig, "gateway"},
		{"pool smaller than block", `"blockSize":24,"ranges":[[{"subnet":"10.50.0.0/26"}]]`, types.ErrInvalidNetworkConfig, "smaller than its block size"},
		{"IPv6 pool smaller than block", `"ipv6BlockSize":116,"ranges":[[{"subnet":"fd00:50::/120"}]]`, types.ErrInvalidNetworkConfig, "smaller than its block size"},
		{"unknown pool", `"pools":["nope"]`, types.ErrInvalidNetworkConfig, "nope"},
		{"gateway is the network address", `"ranges":[[{"subnet":"10.50.0.0/24","gateway":"10.50.0.0"}]]`, types.ErrInvalidNetworkConfig, "gateway"},
		{"no address to hand out v6", `"ranges":[[{"subnet":"fd00:50::/64","rangeStart":"fd00:50::1","rangeEnd":"fd00:50::1"}]]`, types.ErrInvalidNetworkConfig, "no address to hand out"},
		{"whereabouts kubernetes datastore", `"datastore":"kubernetes","range":"10.50.0.0/24"`, types.ErrInvalidNetworkConfig, "ipam.datastore"},
		{"empty datastore path", `"datastore":{"type":"local","path":""},"ranges":[[{"subnet":"10.50.0.0/24"}]]`, types.ErrInvalidNetworkConfig, "ipam.datastore.path"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			// A first valid allocation so that the store exists.
			if _, err := h.add("seed", h.conf("1.0.0", v4Ranges)); err != nil {
				t.Fatal(err)
			}
			before := h.dump()
			// The datastore key in the harness's conf comes first; a later
			// one in the case's body overrides it, as JSON decoding does.
			_, err := h.add("c1", h.conf("1.0.0", tc.ipam))
			if err == nil {
				t.Fatal("ADD succeeded")
			}
			if c := cniCode(t, err); c != tc.code || !strings.Contains(err.Error(), tc.words) {
				t.Fatalf("error = code %d %q; want code %d naming %q", c, err, tc.code, tc.words)
			}
			if after := h.dump(); after != before {
				t.Fatalf("bad input changed the store:\nbefore %s\nafter %s", before, after)
			}
		})
	}
}
