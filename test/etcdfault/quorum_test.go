package etcdfault

import (
	"fmt"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// With two of three members killed (no quorum) an ADD returns CNI error 11
// within its timeouts and allocates nothing; once they are back, ADDs work.
func TestQuorumLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("builds etcd and runs a 3-member cluster")
	}
	ctx := t.Context()
	cl := startCluster(t)
	eps, lock, prefix := cl.Endpoints(), t.TempDir(), "/quorum"
	conf := netconf("net1", "node-a", prefix, eps, `,"requestTimeout":"2s","dialTimeout":"500ms"`)
	if o, err := runPlugin(ctx, t, "ADD", "before", conf, lock); err != nil || o.Code != 0 {
		t.Fatalf("ADD with a healthy cluster: %v %+v", err, o)
	}
	cl.KillMember(cl.Members[0])
	cl.KillMember(cl.Members[1])
	// Until the survivor notices it has lost quorum, it may still take a
	// proposal into its log as leader, and that entry may commit once
	// the others are back: the plugin cannot know (it answers 11 saying
	// the outcome is unknown, and the runtime's DEL after the failed ADD
	// releases what committed). This test is about the state without
	// quorum, so its ADDs start once the survivor knows it has no leader.
	killed := time.Now()
	if err := waitLeaderless(ctx, cl.Members[2], 30*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("the survivor knew it had no leader %v after the kills", time.Since(killed).Round(time.Millisecond))
	for i := range 3 {
		start := time.Now()
		o, err := runPlugin(ctx, t, "ADD", fmt.Sprintf("noquorum%d", i), conf, lock)
		if err != nil {
			t.Fatal(err)
		}
		if o.Code != 11 {
			t.Fatalf("ADD without quorum: code %d (%s), want 11", o.Code, o.Msg)
		}
		t.Logf("no quorum: error 11 after %v: %s", time.Since(start).Round(time.Millisecond), o.Msg)
	}
	for _, m := range cl.Members[:2] {
		if err := cl.Start(m); err != nil {
			t.Fatal(err)
		}
	}
	var (
		o   outcome
		err error
	)
	if !waitFor(30*time.Second, func() bool {
		o, err = runPlugin(ctx, t, "ADD", "after", conf, lock)
		return err == nil && o.Code == 0
	}) {
		t.Fatalf("ADD after quorum came back: %v %+v", err, o)
	}
	a := allocator.New(openStore(t, eps, prefix), nil)
	for i := range 3 {
		if _, exists, err := a.Handle(ctx, "node-a", ipam.HandleID("net1", fmt.Sprintf("noquorum%d", i), "eth0")); err != nil || exists {
			t.Fatalf("ADD noquorum%d returned 11 but left a handle (err %v)", i, err)
		}
	}
	checkStore(t, eps, prefix)
	if all, err := a.Handles(ctx); err != nil || len(all) != 2 {
		t.Fatalf("%d handles (%v), want 2 (before and after)", len(all), err)
	}
}
