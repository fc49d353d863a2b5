package webui

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/storeview"
)

// memSource is a storeview.Source in memory: List returns st, Watch
// hands its callback to the test (on fns) and waits for ctx.
type memSource struct {
	st  storeview.State
	fns chan func(storeview.Batch)
}

func (s *memSource) List(context.Context) (storeview.State, error) { return s.st, nil }

func (s *memSource) Watch(ctx context.Context, _ storeview.Revision, fn func(storeview.Batch)) error {
	s.fns <- fn
	<-ctx.Done()
	return ctx.Err()
}

// BenchmarkViewChangeScale measures what the map does when the view it
// follows changes by one node object (an ADD), over 5 000 nodes x 110
// pods (1 000 with -short): the view's snapshot and the diff into the
// mirror, once the first load and its search index are done.
func BenchmarkViewChangeScale(b *testing.B) {
	nodes := 5000
	if testing.Short() {
		nodes = 1000
	}
	snap := scaleModelSnapshot(b, nodes, 110)
	src := &memSource{st: storeview.State{Rev: "1", Pools: snap.pools, Claims: snap.claims}, fns: make(chan func(storeview.Batch), 1)}
	for _, n := range snap.nodes {
		src.st.Nodes = append(src.st.Nodes, n.Node)
	}
	v := storeview.New(src, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go v.Run(ctx)
	fn := <-src.fns
	f := &viewFeed{v: v, m: newModel(slog.New(slog.DiscardHandler))}
	f.load()
	// The search index is built after the first load, holding the
	// mirror for reading: the changes measured come after it.
	waitIndex(f.m)
	obj := src.st.Nodes[nodes/2]
	rev := 1
	for b.Loop() {
		b.StopTimer()
		rev++
		n := obj
		n.Version = store.Version(strconv.Itoa(rev))
		n.Handles = slices.Clone(obj.Handles)
		n.Handles[0].Created = n.Handles[0].Created.Add(time.Duration(rev) * time.Second)
		fn(storeview.Batch{Rev: storeview.Revision(strconv.Itoa(rev)), Events: []storeview.Event{{Kind: storeview.KindNode, Node: n}}})
		b.StartTimer()
		f.load()
	}
}
