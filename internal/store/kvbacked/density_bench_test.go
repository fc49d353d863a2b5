package kvbacked_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
)

// BenchmarkAddDensity measures a dual-stack ADD's write (one UpdateNode)
// on the embedded etcd on nodes already holding 10 to 2 000 dual-stack
// pods, with the bytes of keys and values it puts (written-B/add) and
// the keys it puts or deletes (keys/add). The DEL that keeps the node's
// size steady is not timed; its keys and bytes (a deleted key counts its
// key's bytes) are reported as keys/del and written-B/del. With
// tracked=true the store keeps the node's hint as a plugin's does
// (Track), which must not add work that grows with the node.
//
//	go test -run '^$' -bench AddDensity -benchtime 200x ./internal/store/kvbacked/
func BenchmarkAddDensity(b *testing.B) {
	for _, tracked := range []bool{false, true} {
		for _, pods := range []int{10, 100, 500, 2000} {
			b.Run(fmt.Sprintf("tracked=%v/pods=%d", tracked, pods), func(b *testing.B) {
				benchAddDensity(b, pods, tracked)
			})
		}
	}
}

func benchAddDensity(b *testing.B, pods int, tracked bool) {
	ctx := context.Background()
	cs := &counting{Store: openEtcd(b)}
	var written, keys, delBytes int
	cs.BeforeTxn = func(_ []kv.Cond, ops []kv.Op) {
		for _, op := range ops {
			keys++
			if !op.Delete {
				written += len(op.Key) + len(op.Value)
			} else {
				delBytes += len(op.Key)
			}
		}
	}
	s := kvbacked.New(cs)
	defer s.Close()
	if tracked {
		s.Track("node-a", kvbacked.NodeHint{})
	}
	n, err := s.CreateNode(ctx, store.Node{Name: "node-a"})
	if err != nil {
		b.Fatal(err)
	}
	for i := range pods {
		next := cloneNode(n)
		addDualStack(b, &next, benchHandle("node-a", fmt.Sprintf("resident-%04d", i)))
		if n, err = s.UpdateNode(ctx, next); err != nil {
			b.Fatal(err)
		}
	}
	var lat latencies
	var bytes, adds, addKeys, delKeys, dels int
	i := 0
	for b.Loop() {
		b.StopTimer()
		id := fmt.Sprintf("bench-%d", i)
		i++
		next := cloneNode(n)
		addDualStack(b, &next, benchHandle("node-a", id))
		written, keys = 0, 0
		b.StartTimer()
		start := time.Now()
		if n, err = s.UpdateNode(ctx, next); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		b.StopTimer()
		bytes += written
		addKeys += keys
		adds++
		next = cloneNode(n)
		dropHandle(b, &next, ipam.HandleID("k8s-pod-network", id, "eth0"))
		written, keys, delBytes = 0, 0, 0
		if n, err = s.UpdateNode(ctx, next); err != nil {
			b.Fatal(err)
		}
		dels += written + delBytes
		delKeys += keys
		b.StartTimer()
	}
	lat.report(b)
	b.ReportMetric(float64(bytes)/float64(adds), "written-B/add")
	b.ReportMetric(float64(addKeys)/float64(adds), "keys/add")
	b.ReportMetric(float64(dels)/float64(adds), "written-B/del")
	b.ReportMetric(float64(delKeys)/float64(adds), "keys/del")
}
