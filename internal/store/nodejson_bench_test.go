package store

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// The bench pools and handles are those of kvbacked's benchmarks
// (kvbacked/bench_test.go), which store cannot import.
var (
	codecPool4 = ipam.Pool{Name: "b4", CIDR: netip.MustParsePrefix("10.8.0.0/16"), BlockSize: 26, Gateway: netip.MustParseAddr("10.8.0.1")}
	codecPool6 = ipam.Pool{Name: "b6", CIDR: netip.MustParsePrefix("fd08::/64"), BlockSize: 122}
)

// codecNode is node-a holding pods dual-stack pods, each with every field
// the plugin fills, taking blocks of both bench pools as they fill.
func codecNode(tb testing.TB, pods int) Node {
	tb.Helper()
	n := Node{Name: "node-a"}
	for i := range pods {
		c := fmt.Sprintf("resident-%03d", i)
		h := ipam.Handle{ID: ipam.HandleID("k8s-pod-network", c, "eth0"), Network: "k8s-pod-network",
			ContainerID: c, IfName: "eth0", Node: n.Name, NetNS: "/var/run/netns/cni-" + c,
			Namespace: "default", Pod: "pod-" + c, PodUID: "6f0c7e1a-2b1d-4c55-9e0a-" + c,
			Created: time.Date(2026, 11, 23, 13, 0, 0, 0, time.UTC)}
		for _, p := range []ipam.Pool{codecPool4, codecPool6} {
			bi := slices.IndexFunc(n.Blocks, func(b ipam.Block) bool { return b.Pool == p.Name && b.FreeCount(p) > 0 })
			if bi < 0 {
				n.Blocks = append(n.Blocks, ipam.NewBlock(p, p.BlockAt(uint64(len(n.Blocks))), n.Name))
				bi = len(n.Blocks) - 1
			}
			b, a, err := n.Blocks[bi].Assign(p, h.ID)
			if err != nil {
				tb.Fatal(err)
			}
			n.Blocks[bi] = b
			h.IPs = append(h.IPs, ipam.HandleIP{Addr: a, Pool: p.Name, Block: b.CIDR})
		}
		n.Handles = append(n.Handles, h)
	}
	return n
}

// BenchmarkNodeCodec times MarshalNode and UnmarshalNode next to what
// they were with encoding/json alone (EncodeNode then json.Marshal,
// json.Unmarshal then DecodeNode), and the JSON codecs alone next to
// encoding/json's, on node objects of 30, 110 and 500 dual-stack pods.
//
//	go test -run '^$' -bench NodeCodec -benchtime 200x ./internal/store/
func BenchmarkNodeCodec(b *testing.B) {
	for _, pods := range []int{30, 110, 500} {
		n := codecNode(b, pods)
		spec, err := EncodeNode(n)
		if err != nil {
			b.Fatal(err)
		}
		data, err := json.Marshal(spec)
		if err != nil {
			b.Fatal(err)
		}
		if _, ok := parseNodeSpec(data); !ok {
			b.Fatal("parseNodeSpec declines the bench node")
		}
		run := func(name string, f func() error) {
			b.Run(fmt.Sprintf("pods=%d/%s", pods, name), func(b *testing.B) {
				b.SetBytes(int64(len(data)))
				b.ReportAllocs()
				for b.Loop() {
					if err := f(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		run("MarshalNode", func() error { _, err := MarshalNode(n); return err })
		run("MarshalNode-encoding-json", func() error {
			s, err := EncodeNode(n)
			if err != nil {
				return err
			}
			_, err = json.Marshal(s)
			return err
		})
		run("UnmarshalNode", func() error { _, err := UnmarshalNode(n.Name, data); return err })
		run("UnmarshalNode-encoding-json", func() error {
			var s NodeSpec
			if err := json.Unmarshal(data, &s); err != nil {
				return err
			}
			_, err := DecodeNode(n.Name, s)
			return err
		})
		run("appendNodeSpec", func() error {
			_, err := appendNodeSpec(make([]byte, 0, nodeSpecSizeHint(&spec)), &spec)
			return err
		})
		run("json.Marshal", func() error { _, err := json.Marshal(spec); return err })
		run("parseNodeSpec", func() error { parseNodeSpec(data); return nil })
		run("json.Unmarshal", func() error { var s NodeSpec; return json.Unmarshal(data, &s) })
		run("DecodeNode", func() error { _, err := DecodeNode(n.Name, spec); return err })
		run("Validate", n.Validate)
	}
}
