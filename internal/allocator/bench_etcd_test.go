package allocator_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
)

// noHints is a HintCache that remembers nothing: every operation reads.
type noHints struct{}

func (noHints) Load(string) (allocator.Hint, bool) { return allocator.Hint{}, false }
func (noHints) Store(string, allocator.Hint)       {}
func (noHints) Forget(string)                      {}

// BenchmarkReleaseEtcd measures Release against a real embedded etcd,
// with the node's hint warm (as the plugin keeps it in files) and without
// hints, and reports the store round trips of one release (reads/op,
// txns/op); the allocation before each release is not timed.
//
//	go test -run '^$' -bench ReleaseEtcd -benchtime 300x ./internal/allocator/
func BenchmarkReleaseEtcd(b *testing.B) {
	srv := etcdtest.ForTest(b, nil)
	ctx := context.Background()
	pool := ipam.Pool{Name: "b4", CIDR: prefix("10.8.0.0/16"), BlockSize: 26}
	for mi, mode := range []string{"warm-hint", "memory-hint", "no-hint"} {
		b.Run(mode, func(b *testing.B) {
			st, err := etcd.Open(ctx, etcd.Config{Endpoints: []string{srv.Endpoint}, Prefix: fmt.Sprintf("/bench-release-%d", mi)})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			cs := &countingStore{Store: st}
			a := newAllocator(b, cs)
			switch mode {
			case "warm-hint": // files, as the plugin keeps them
				a.SetHints(allocator.FileHints{Dir: hintDir(b)})
			case "no-hint":
				a.SetHints(noHints{})
			}
			if _, err := a.EnsurePool(ctx, pool); err != nil {
				b.Fatal(err)
			}
			for i := range 20 {
				allocate(b, a, "node-a", fmt.Sprintf("resident-%d", i), set("b4"))
			}
			reads, txns, i := 0, 0, 0
			for b.Loop() {
				b.StopTimer()
				id := fmt.Sprintf("bench-%d", i)
				i++
				allocate(b, a, "node-a", id, set("b4"))
				cs.reads, cs.txns = 0, 0
				b.StartTimer()
				if _, err := a.Release(ctx, id); err != nil {
					b.Fatal(err)
				}
				reads, txns = reads+cs.reads, txns+cs.txns
			}
			b.ReportMetric(float64(reads)/float64(i), "reads/op")
			b.ReportMetric(float64(txns)/float64(i), "txns/op")
		})
	}
}

// hintDir is a temp dir for hint files on a tmpfs when there is one, as
// /run (the plugin's DefaultLockDir) is on a node: on a journaling disk
// file system replacing a file by rename costs a write-out of its own.
func hintDir(b *testing.B) string {
	dir, err := os.MkdirTemp("/dev/shm", "ipkeeper-bench-")
	if err != nil {
		return b.TempDir()
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
