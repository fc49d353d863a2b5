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
// pods, with the bytes of keys and values it puts. The DEL that keeps the
// node's size steady is not timed.
//
//	go test -run '^$' -bench AddDensity -benchtime 200x ./internal/store/kvbacked/
func BenchmarkAddDensity(b *testing.B) {
	ctx := context.Background()
	for _, pods := range []int{10, 100, 500, 2000} {
		b.Run(fmt.Sprintf("pods=%d", pods), func(b *testing.B) {
			cs := &counting{Store: openEtcd(b)}
			var written int
			cs.BeforeTxn = func(_ []kv.Cond, ops []kv.Op) {
				for _, op := range ops {
					if !op.Delete {
						written += len(op.Key) + len(op.Value)
					}
				}
			}
			s := kvbacked.New(cs)
			defer s.Close()
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
			var bytes, adds int
			i := 0
			for b.Loop() {
				b.StopTimer()
				id := fmt.Sprintf("bench-%d", i)
				i++
				next := cloneNode(n)
				addDualStack(b, &next, benchHandle("node-a", id))
				written = 0
				b.StartTimer()
				start := time.Now()
				if n, err = s.UpdateNode(ctx, next); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
				b.StopTimer()
				bytes += written
				adds++
				next = cloneNode(n)
				dropHandle(b, &next, ipam.HandleID("k8s-pod-network", id, "eth0"))
				if n, err = s.UpdateNode(ctx, next); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			lat.report(b)
			b.ReportMetric(float64(bytes)/float64(adds), "written-B/add")
		})
	}
}
