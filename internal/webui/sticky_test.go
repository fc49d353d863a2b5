package webui

import (
	"context"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// TestMapShowsSticky: the block detail names each sticky address's
// identity, and since when no pod holds a parked one, IPv4 and IPv6.
func TestMapShowsSticky(t *testing.T) {
	dir := t.TempDir()
	st := openLocal(t, dir)
	ctx := context.Background()
	a := allocator.New(st, nil)
	a.Now = func() time.Time { return fixtureTime }
	for _, p := range []ipam.Pool{poolV4, poolV6} {
		if err := a.CreatePool(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	var hs []ipam.Handle
	for _, c := range []string{"pg-0", "pg-1"} {
		h, err := a.AllocateSticky(ctx, allocator.Request{Handle: ipam.Handle{ID: "net." + c + ".eth0", Network: "net", ContainerID: c, IfName: "eth0",
			Node: "node-a", Namespace: "db", Pod: c, Sticky: "pod/db/" + c}, Sets: [][]string{{poolV4.Name}, {poolV6.Name}}})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	if _, parked, err := a.ReleaseOrPark(ctx, "node-a", hs[1].ID); err != nil || !parked {
		t.Fatalf("parked=%v %v", parked, err)
	}
	st.Close()
	s := startUI(t, localOpts(dir))
	for _, ip := range hs[0].IPs {
		var d blockDetail
		s.getJSON(t, "/api/blocks/"+ip.Block.String(), 200, &d)
		got := map[string]addrView{}
		for _, av := range d.Addresses {
			got[av.Handle] = av
		}
		live, parked := got[hs[0].ID], got[hs[1].ID]
		if live.Sticky != "pod/db/pg-0" || live.Parked != nil || live.Pod != "pg-0" {
			t.Errorf("%s: live %+v", ip.Block, live)
		}
		if parked.Sticky != "pod/db/pg-1" || parked.Parked == nil || !parked.Parked.Equal(fixtureTime) {
			t.Errorf("%s: parked %+v", ip.Block, parked)
		}
	}
}
