package allocator_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
)

// BenchmarkFreshOpenAdd measures what a plugin process does for one ADD
// on the local file and the embedded etcd, on a node holding 10 or 2 000
// dual-stack pods: datastore.Open with the node and pools to warm (one
// read of the marker, the node's parts and the pools; on etcd the node's
// hint file first, "etcd-nohint" without it), an allocator told of them,
// one dual-stack ADD and Close (on etcd saving the hint file; the DEL
// that keeps the node's size steady is not timed). It reports the median
// and the CPU time per ADD (the embedded etcd's included).
//
//	go test -run '^$' -bench FreshOpenAdd -benchtime 200x ./internal/allocator/
func BenchmarkFreshOpenAdd(b *testing.B) {
	for _, backend := range []string{"local", "etcd", "etcd-nohint"} {
		for _, pods := range []int{10, 2000} {
			b.Run(fmt.Sprintf("%s/pods=%d", backend, pods), func(b *testing.B) { benchFreshOpenAdd(b, backend, pods) })
		}
	}
}

func benchFreshOpenAdd(b *testing.B, backend string, pods int) {
	ctx := context.Background()
	ds := config.Datastore{Type: config.DatastoreLocal, Path: b.TempDir()}
	lockDir := b.TempDir()
	if backend != "local" {
		srv := etcdtest.ForTest(b, nil)
		ds = config.Datastore{Type: config.DatastoreEtcd, Endpoints: []string{srv.Endpoint}, Prefix: "/bench"}
		b.Setenv(datastore.LockDirEnv, lockDir)
	}
	open := func() (*allocator.Allocator, func()) {
		if backend == "etcd-nohint" {
			hints, _ := filepath.Glob(filepath.Join(lockDir, "*.hint"))
			for _, h := range hints {
				_ = os.Remove(h)
			}
		}
		var warmed datastore.Warmed
		s, err := datastore.Open(ctx, ds, datastore.Options{Plugin: true, Warm: datastore.Warm{Node: "node-a", Pools: []string{"v4", "v6"}}, Warmed: &warmed})
		if err != nil {
			b.Fatal(err)
		}
		a := allocator.New(s, nil)
		if warmed.OK {
			a.Remember(warmed.Node, warmed.Pools, warmed.Claims...)
		}
		return a, func() { _ = s.Close() }
	}
	a, closeStore := open()
	fillNode(b, a, pods)
	closeStore()
	var adds []time.Duration
	var cpu time.Duration
	i := 0
	for b.Loop() {
		id := fmt.Sprintf("bench-%d", i)
		i++
		start, cpu0 := time.Now(), cpuTime()
		a, closeStore := open()
		h, err := a.Allocate(ctx, podRequest("node-a", id, "v4", "v6"))
		if err != nil {
			b.Fatal(err)
		}
		closeStore()
		adds, cpu = append(adds, time.Since(start)), cpu+cpuTime()-cpu0
		b.StopTimer()
		a, closeStore = open()
		if _, err := a.Release(ctx, "node-a", h.ID); err != nil {
			b.Fatal(err)
		}
		closeStore()
		b.StartTimer()
	}
	b.ReportMetric(p50(adds), "add-p50-ms")
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(len(adds)), "cpu-ms/add")
}
