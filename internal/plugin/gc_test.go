package plugin

import (
	"context"
	"net/netip"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/consistency"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// TestGCAdoptsClaimsOfKilledADDs: an ADD killed between claiming a block
// and writing its node's object leaves a claim no node object holds; the
// node's CNI GC adopts it, so that `ipkeeperctl check` is clean after a
// crash and the runtime's GC, for IPv4 and IPv6 pools alike.
func TestGCAdoptsClaimsOfKilledADDs(t *testing.T) {
	for _, tc := range []struct {
		name, ranges string
		pool         string
		orphan       netip.Prefix
	}{
		{"IPv4", v4Ranges, "net1-10.20.0.0-24", netip.MustParsePrefix("10.20.0.64/26")},
		{"IPv6", `"ranges":[[{"subnet":"fd00:20::/120"}]]`, "net1-fd00:20::-120", netip.MustParsePrefix("fd00:20::40/122")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			stdin := h.conf("1.1.0", tc.ranges)
			if _, err := h.add("c1", stdin); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			ds := config.Datastore{Type: config.DatastoreLocal, Path: h.dir}
			s, err := datastore.Open(ctx, ds, datastore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.CreateClaim(ctx, store.Claim{BlockRef: store.BlockRef{Pool: tc.pool, CIDR: tc.orphan}, Node: "node-a"}); err != nil {
				t.Fatal(err)
			}
			rep, err := consistency.CheckStore(ctx, s)
			s.Close()
			if err != nil || rep.Err() == nil {
				t.Fatalf("check before GC found nothing (%v): the orphan claim is not one", err)
			}
			gc := h.conf("1.1.0", tc.ranges, `"cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"}]`)
			if err := h.p.GC(&skel.CmdArgs{StdinData: gc}); err != nil {
				t.Fatalf("GC: %v", err)
			}
			s, err = datastore.Open(ctx, ds, datastore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			rep, err = consistency.CheckStore(ctx, s)
			s.Close()
			if err != nil {
				t.Fatal(err)
			}
			if err := rep.Err(); err != nil {
				t.Fatalf("after GC: %v", err)
			}
			if got := h.handles(); len(got) != 1 || got[0] != "net1.c1.eth0" {
				t.Fatalf("handles after GC: %v, want c1's only", got)
			}
		})
	}
}
