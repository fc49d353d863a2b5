package main

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
)

var handleSeq atomic.Int64

// allocBench allocates from c workers for d, worker w's i-th allocation on
// node (w+i*c) mod nodes. With locked, a node runs one allocation at a
// time, as the plugin's node lock makes it.
func allocBench(ctx context.Context, s kv.Store, c, nodes int, locked bool, d time.Duration) result {
	a := allocator.New(s, nil)
	pool := ipam.Pool{Name: "bench", CIDR: netip.MustParsePrefix("10.0.0.0/12"), BlockSize: 26}
	if _, err := a.EnsurePool(ctx, pool); err != nil {
		log.Fatal(err)
	}
	locks := make([]sync.Mutex, nodes)
	return measure(c, d, func(w, i int) error {
		n := (w + i*c) % nodes
		if locked {
			locks[n].Lock()
			defer locks[n].Unlock()
		}
		id := fmt.Sprintf("bench.c%d.eth0", handleSeq.Add(1))
		_, err := a.Allocate(ctx, allocator.Request{
			Handle: ipam.Handle{ID: id, Node: fmt.Sprintf("node-%04d", n), Network: "bench", IfName: "eth0"},
			Sets:   [][]string{{"bench"}},
		})
		return err
	})
}
