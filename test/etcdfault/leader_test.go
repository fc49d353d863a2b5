package etcdfault

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// kill -9 of the raft leader of a three-member cluster (separate
// processes) during 2 000 plugin ADDs from 20 nodes, then its restart:
// every ADD either succeeded, with its addresses durable and unique, or
// returned CNI error 11 with nothing allocated; the store stays consistent.
func TestLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds etcd and runs 2 000 plugin processes")
	}
	ctx := t.Context()
	cl := startCluster(t)
	eps := cl.Endpoints()
	const nodes, total, killAt, restartAt = 20, 2000, 500, 1000
	prefix := "/leaderkill"
	locks := make([]string, nodes)
	for i := range locks {
		locks[i] = t.TempDir()
	}
	type rec struct {
		node int
		out  outcome
		err  error
	}
	recs := make([]rec, total)
	var next, done atomic.Int64
	var killedAt, restartedAt time.Time
	var victim *Member
	var wg sync.WaitGroup
	start := time.Now()
	for n := range nodes {
		conf := netconf("net1", fmt.Sprintf("node-%02d", n), prefix, eps, "")
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= total {
					return
				}
				o, err := runPlugin(ctx, t, "ADD", fmt.Sprintf("c%04d", i), conf, locks[n])
				recs[i] = rec{node: n, out: o, err: err}
				done.Add(1)
			}
		})
	}
	for done.Load() < killAt {
		time.Sleep(5 * time.Millisecond)
	}
	victim, err := cl.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cl.KillMember(victim)
	killedAt = time.Now()
	t.Logf("killed leader %s (kill -9) after %d ADDs", victim.Name, done.Load())
	for done.Load() < restartAt {
		time.Sleep(5 * time.Millisecond)
	}
	if err := cl.Start(victim); err != nil {
		t.Fatal(err)
	}
	restartedAt = time.Now()
	t.Logf("restarted %s %v after the kill, at %d ADDs", victim.Name, restartedAt.Sub(killedAt).Round(time.Millisecond), done.Load())
	wg.Wait()
	elapsed := time.Since(start)

	a := allocator.New(openStore(t, eps, prefix), nil)
	ok, tryLater := 0, 0
	owner := map[netip.Addr]int{}
	for i, r := range recs {
		id := ipam.HandleID("net1", fmt.Sprintf("c%04d", i), "eth0")
		h, exists, err := a.Handle(ctx, fmt.Sprintf("node-%02d", r.node), id)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case r.err != nil:
			t.Errorf("ADD %d: %v", i, r.err)
		case r.out.Code == 11:
			tryLater++
			if exists {
				t.Errorf("ADD %d returned error 11 (%s) but its handle holds %v", i, r.out.Msg, h.IPs)
			}
		case r.out.Code != 0:
			t.Errorf("ADD %d: CNI error %d: %s", i, r.out.Code, r.out.Msg)
		default:
			ok++
			if !exists {
				t.Errorf("ADD %d succeeded with %v but its handle is gone", i, r.out.IPs)
				continue
			}
			for j, ip := range r.out.IPs {
				if j >= len(h.IPs) || h.IPs[j].Addr != ip {
					t.Errorf("ADD %d printed %v, the store holds %v", i, r.out.IPs, h.IPs)
				}
				if other, dup := owner[ip]; dup {
					t.Errorf("%s given to ADD %d and ADD %d", ip, other, i)
				}
				owner[ip] = i
			}
		}
	}
	rep := checkStore(t, eps, prefix)
	all, err := a.Handles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != ok {
		t.Errorf("%d handles in the store, %d successful ADDs", len(all), ok)
	}
	t.Logf("%d ADDs from %d nodes in %v: %d succeeded, %d error 11; store: %d handles, %d addresses, %d blocks",
		total, nodes, elapsed.Round(time.Millisecond), ok, tryLater, rep.Counts.Handles, rep.Counts.Allocated, rep.Counts.Blocks)
}
