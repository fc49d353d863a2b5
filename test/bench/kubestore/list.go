package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipkeeper/ipkeeper/test/bench/latency"
)

func listNode(i int) string { return fmt.Sprintf("node-%04d", i) }

// listBench creates nodes x 2 block objects (a /26 and a /122 per node,
// 16 owners each, labelled with their node) and measures label-selector
// LISTs of one node's objects among them, next to a GET and a LIST of all.
// Before that it measures create-if-absent (a new name, and a name that
// exists) and a delete with a resourceVersion precondition.
func listBench(ctx context.Context, k *kubeStore, nodes, samples int) error {
	fmt.Printf("\n4. create-if-absent and delete on ProtoBlock (sequential, %d each; a half-full /26 block, %d B spec)\n", samples, jsonLen(halfBlock(0)))
	vers := make([]string, samples)
	newR, err := latency.Times(samples, func(i int) error {
		v, err := k.create(ctx, resBlock, fmt.Sprintf("cia-%05d", i), map[string]string{"ipkeeper.io/node": "cia"}, halfBlock(i))
		vers[i] = v
		return err
	})
	if err != nil {
		return err
	}
	existR, err := latency.Times(samples, func(i int) error {
		_, err := k.create(ctx, resBlock, fmt.Sprintf("cia-%05d", i), map[string]string{"ipkeeper.io/node": "cia"}, halfBlock(i))
		if err == nil {
			return fmt.Errorf("create of existing cia-%05d succeeded", i)
		}
		if !isConflict(err) {
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	delR, err := latency.Times(samples, func(i int) error { return k.delete(ctx, resBlock, fmt.Sprintf("cia-%05d", i), vers[i]) })
	if err != nil {
		return err
	}
	fmt.Printf("%-44s %9s %9s\n", "", "p50", "p99")
	fmt.Printf("%-44s %9s %9s\n", "create (name absent: created)", latency.Ms(newR.Pct(50)), latency.Ms(newR.Pct(99)))
	fmt.Printf("%-44s %9s %9s\n", "create (name exists: 409 AlreadyExists)", latency.Ms(existR.Pct(50)), latency.Ms(existR.Pct(99)))
	fmt.Printf("%-44s %9s %9s\n", "delete with resourceVersion precondition", latency.Ms(delR.Pct(50)), latency.Ms(delR.Pct(99)))

	fmt.Printf("\n5. label-selector LIST of one node's blocks among %d nodes x 2 blocks (16 owners each)\n", nodes)
	t0 := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var ferr atomic.Value
	for range 16 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= nodes {
					return
				}
				v4, v6 := nodeCIDRs(i, 0)
				for _, p := range []netip.Prefix{v4, v6} {
					if _, err := k.create(ctx, resBlock, "l-"+objName(p), map[string]string{"ipkeeper.io/node": listNode(i)}, listBlock(p, listNode(i))); err != nil {
						ferr.Store(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if e, _ := ferr.Load().(error); e != nil {
		return e
	}
	fill := time.Since(t0)
	fmt.Printf("filled %d objects in %v (%.0f creates/s at concurrency 16)\n", 2*nodes, fill.Round(time.Millisecond), float64(2*nodes)/fill.Seconds())
	type q struct {
		what string
		op   func(i int) error
		n    int
	}
	sel := func(i int) string { return "ipkeeper.io/node=" + listNode((i*37)%nodes) }
	var got int
	qs := []q{
		{"GET one block by name", func(i int) error {
			v4, _ := nodeCIDRs((i*37)%nodes, 0)
			_, err := k.rc.Get().Resource(resBlock).Name("l-" + objName(v4)).Do(ctx).Raw()
			return err
		}, samples},
		{"LIST labelSelector node=X (consistent read)", func(i int) error {
			raw, err := k.rc.Get().Resource(resBlock).Param("labelSelector", sel(i)).Do(ctx).Raw()
			got = countItems(raw)
			return err
		}, samples},
		{"LIST labelSelector node=X, resourceVersion=0", func(i int) error {
			raw, err := k.rc.Get().Resource(resBlock).Param("labelSelector", sel(i)).Param("resourceVersion", "0").Do(ctx).Raw()
			got = countItems(raw)
			return err
		}, samples},
		{fmt.Sprintf("LIST all (%d+ objects)", 2*nodes), func(int) error {
			raw, err := k.rc.Get().Resource(resBlock).Do(ctx).Raw()
			got = countItems(raw)
			return err
		}, 10},
	}
	fmt.Printf("%-48s %6s %9s %9s %7s\n", "", "n", "p50", "p99", "items")
	for _, x := range qs {
		got = -1
		r, err := latency.Times(x.n, x.op)
		if err != nil {
			return fmt.Errorf("%s: %w", x.what, err)
		}
		items := "1"
		if got >= 0 {
			items = fmt.Sprint(got)
		}
		fmt.Printf("%-48s %6d %9s %9s %7s\n", x.what, x.n, latency.Ms(r.Pct(50)), latency.Ms(r.Pct(99)), items)
	}
	return nil
}

// halfBlock is a /26 block with 32 owners.
func halfBlock(i int) blockSpec {
	b := newBlock(netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 240, byte(i >> 2), byte(i&3) << 6}), 26), "cia")
	for range 32 {
		b.assign(newOwner("cia"))
	}
	return b
}

// listBlock is a block of node with 16 owners.
func listBlock(p netip.Prefix, node string) blockSpec {
	b := newBlock(p, node)
	for range 16 {
		b.assign(newOwner(node))
	}
	return b
}

func jsonLen(v any) int {
	b, _ := json.Marshal(v)
	return len(b)
}

func isConflict(err error) bool { return errors.Is(err, errConflict) }

func countItems(raw []byte) int {
	var l struct {
		Items []json.RawMessage `json:"items"`
	}
	if json.Unmarshal(raw, &l) != nil {
		return -1
	}
	return len(l.Items)
}
