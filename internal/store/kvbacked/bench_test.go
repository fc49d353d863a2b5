package kvbacked_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/nodealloc"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
)

// The benchmarks' pools: the allocator's blocks and the node objects' are
// cut from the same ones.
var (
	bench4 = ipam.Pool{Name: "b4", CIDR: netip.MustParsePrefix("10.8.0.0/16"), BlockSize: 26, Gateway: netip.MustParseAddr("10.8.0.1")}
	bench6 = ipam.Pool{Name: "b6", CIDR: netip.MustParsePrefix("fd08::/64"), BlockSize: 122}
)

// benchHandle is a pod's handle record on node, without addresses, with
// every field the plugin fills.
func benchHandle(node, container string) ipam.Handle {
	return ipam.Handle{ID: ipam.HandleID("k8s-pod-network", container, "eth0"), Network: "k8s-pod-network",
		ContainerID: container, IfName: "eth0", Node: node, NetNS: "/var/run/netns/cni-" + container,
		Namespace: "default", Pod: "pod-" + container, PodUID: "6f0c7e1a-2b1d-4c55-9e0a-" + container,
		Created: time.Date(2026, 11, 23, 13, 0, 0, 0, time.UTC)}
}

// addDualStack gives h one address of each bench pool in n (taking the
// pool's next block into n when n's are full) and adds its record, as an
// ADD does in memory before its one UpdateNode (by nodealloc's edits).
func addDualStack(tb testing.TB, n *store.Node, h ipam.Handle) {
	tb.Helper()
	var ips []ipam.HandleIP
	for _, p := range []ipam.Pool{bench4, bench6} {
		next, ip, err := nodealloc.Assign(*n, p, h.ID)
		if errors.Is(err, nodealloc.ErrNoRoom) {
			*n = nodealloc.AddBlock(*n, p, p.BlockAt(uint64(len(n.Blocks))))
			next, ip, err = nodealloc.Assign(*n, p, h.ID)
		}
		if err != nil {
			tb.Fatal(err)
		}
		*n, ips = next, append(ips, ip)
	}
	*n = nodealloc.Record(*n, h, ips)
}

// dropHandle frees handle id's addresses in n and removes its record, as
// a DEL does in memory.
func dropHandle(tb testing.TB, n *store.Node, id string) {
	tb.Helper()
	next, ips := nodealloc.Release(*n, id)
	if len(ips) == 0 {
		tb.Fatalf("no record of %q", id)
	}
	*n = next
}

// cloneNode returns n: the edits addDualStack and dropHandle make leave
// the object they start from as it was.
func cloneNode(n store.Node) store.Node { return n }

// latencies collects the timed operations of a benchmark and reports
// ops/s over them and their median.
type latencies []time.Duration

func (l latencies) report(b *testing.B) {
	var sum time.Duration
	for _, d := range l {
		sum += d
	}
	s := slices.Sorted(slices.Values(l))
	b.ReportMetric(float64(len(l))/sum.Seconds(), "ops/s")
	b.ReportMetric(float64(s[len(s)/2].Microseconds())/1000, "p50-ms")
}

// BenchmarkAddEtcd measures a dual-stack ADD on the embedded etcd on a node
// that holds 30 or 110 dual-stack pods: the typed store's one UpdateNode
// of the node object (0 reads, 1 transaction). Only the ADD is timed; the
// DEL that keeps the node's size steady is not.
//
//	go test -run '^$' -bench AddEtcd -benchtime 400x ./internal/store/kvbacked/
func BenchmarkAddEtcd(b *testing.B) {
	ctx := context.Background()
	for _, pods := range []int{30, 110} {
		b.Run(fmt.Sprintf("UpdateNode/pods=%d", pods), func(b *testing.B) {
			cs := &counting{Store: openEtcd(b)}
			s := kvbacked.New(cs)
			defer s.Close()
			n := store.Node{Name: "node-a"}
			for i := range pods {
				addDualStack(b, &n, benchHandle("node-a", fmt.Sprintf("resident-%03d", i)))
			}
			n, err := s.CreateNode(ctx, n)
			if err != nil {
				b.Fatal(err)
			}
			enc, err := store.MarshalNode(n)
			if err != nil {
				b.Fatal(err)
			}
			var lat latencies
			i := 0
			for b.Loop() {
				b.StopTimer()
				id := fmt.Sprintf("bench-%d", i)
				i++
				next := cloneNode(n)
				addDualStack(b, &next, benchHandle("node-a", id))
				cs.Reset()
				b.StartTimer()
				start := time.Now()
				if n, err = s.UpdateNode(ctx, next); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
				b.StopTimer()
				if gets, lists, txns := cs.Counts(); gets+lists != 0 || txns != 1 {
					b.Fatalf("UpdateNode: %d reads, %d txns", gets+lists, txns)
				}
				next = cloneNode(n)
				dropHandle(b, &next, ipam.HandleID("k8s-pod-network", id, "eth0"))
				if n, err = s.UpdateNode(ctx, next); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			lat.report(b)
			b.ReportMetric(float64(len(enc)), "object-B")
		})
	}
}
