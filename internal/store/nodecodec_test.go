package store_test

import (
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

func TestQueueRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		q    []int
		size int
		want string
	}{
		{"IPv4 /26 fresh", seq(0, 64), 64, "0-63"},
		{"IPv6 /122 fresh", seq(0, 64), 64, "0-63"},
		{"IPv4 /24 after releases", append(seq(5, 256), 2, 0, 1), 256, "5-255,2,0-1"},
		{"IPv6 /112 fresh", seq(0, 1<<16), 1 << 16, "0-65535"},
		{"full", []int{}, 64, ""},
		{"one", []int{7}, 64, "7"},
		{"descending", []int{3, 2, 1}, 4, "3,2,1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := store.FormatQueue(c.q)
			if s != c.want {
				t.Fatalf("FormatQueue = %q, want %q", s, c.want)
			}
			got, err := store.ParseQueue(s, c.size)
			if err != nil || !slices.Equal(got, c.q) {
				t.Fatalf("ParseQueue(%q) = %v, %v; want %v", s, got, err, c.q)
			}
		})
	}
}

func TestParseQueueRefuses(t *testing.T) {
	for _, s := range []string{"64", "0-64", "1-1", "2-1", "01", "-1", "1,1", "0-3,2", "a", "1-", "1--2", ",", "0,", "+1", " 1", "99999999"} {
		if q, err := store.ParseQueue(s, 64); err == nil {
			t.Errorf("ParseQueue(%q, 64) = %v, want an error", s, q)
		}
	}
}

func FuzzParseQueue(f *testing.F) {
	for _, s := range []string{"0-63", "5-255,2,0-1", "", "3,2,1", "1,1", "0-99999"} {
		f.Add(s, 64)
	}
	f.Fuzz(func(t *testing.T, s string, size int) {
		if size <= 0 || size > 1<<16 {
			return
		}
		q, err := store.ParseQueue(s, size)
		if err != nil {
			return
		}
		seen := map[int]bool{}
		for _, o := range q {
			if o < 0 || o >= size || seen[o] {
				t.Fatalf("ParseQueue(%q, %d) = %v: ordinal %d out of range or repeated", s, size, q, o)
			}
			seen[o] = true
		}
		again, err := store.ParseQueue(store.FormatQueue(q), size)
		if err != nil || !slices.Equal(again, q) {
			t.Fatalf("round trip of %v: %v, %v", q, again, err)
		}
	})
}

// exampleNode is a dual-stack node object with one pod, one borrower's
// record and a record whose ID does not spell its attachment.
func exampleNode(t testing.TB) store.Node {
	v4 := ipam.Pool{Name: "v4", CIDR: netip.MustParsePrefix("10.0.0.0/16"), BlockSize: 26}
	v6 := ipam.Pool{Name: "v6", CIDR: netip.MustParsePrefix("fd00::/64"), BlockSize: 122}
	n := store.Node{Name: "node-a", Blocks: []ipam.Block{ipam.NewBlock(v4, v4.BlockAt(0), "node-a"), ipam.NewBlock(v6, v6.BlockAt(0), "node-a")}}
	created := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	pod := ipam.Handle{ID: "k8s.c1.eth0", Network: "k8s", ContainerID: "c1", IfName: "eth0", Node: "node-a", Namespace: "default", Pod: "web-0", PodUID: "u1", NetNS: "/var/run/netns/cni-1", Created: created}
	lent := ipam.Handle{ID: "k8s.c2.eth0", Network: "k8s", ContainerID: "c2", IfName: "eth0", Node: "node-b", Created: created}
	imported := ipam.Handle{ID: "k8s-pod-network.c3", Network: "k8s-pod-network", ContainerID: "c3", IfName: "eth0", Node: "node-a", Created: created}
	for _, h := range []*ipam.Handle{&pod, &lent, &imported} {
		for i, p := range []ipam.Pool{v4, v6} {
			if h == &imported && i == 1 {
				continue
			}
			b, a, err := n.Blocks[i].Assign(p, h.ID)
			if err != nil {
				t.Fatal(err)
			}
			n.Blocks[i] = b
			h.IPs = append(h.IPs, ipam.HandleIP{Addr: a, Pool: p.Name, Block: b.CIDR})
		}
		n.Handles = append(n.Handles, *h)
	}
	n.Loans = []store.Loan{{Handle: "k8s.c4.eth0", Lender: "node-c"}}
	return n
}

func TestNodeRoundTrip(t *testing.T) {
	n := exampleNode(t)
	data, err := store.MarshalNode(n)
	if err != nil {
		t.Fatal(err)
	}
	got, err := store.UnmarshalNode(n.Name, data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, n) {
		t.Fatalf("round trip:\n got  %+v\n want %+v", got, n)
	}
	// Nothing is said twice: a block holds no owners, a record its node
	// only when borrowed, its attachment only when the ID does not say it.
	s := string(data)
	for _, absent := range []string{"owners", `"node":"node-a"`, `"attachment":["k8s","c1"`} {
		if strings.Contains(s, absent) {
			t.Errorf("encoding holds %s: %s", absent, s)
		}
	}
	for _, present := range []string{`"node":"node-b"`, `"attachment":["k8s-pod-network","c3","eth0"]`, `"free":"0,4-63"`, `"free":"0,3-63"`, `"loans":[{"handle":"k8s.c4.eth0","lender":"node-c"}]`} {
		if !strings.Contains(s, present) {
			t.Errorf("encoding lacks %s: %s", present, s)
		}
	}
}

func TestUnmarshalNodeRefuses(t *testing.T) {
	good, err := store.MarshalNode(exampleNode(t))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, old, new string }{
		{"address twice", `"ips":[{"addr":"10.0.0.1"`, `"ips":[{"addr":"10.0.0.0"`},
		{"owned and free", `"free":"0,4-63"`, `"free":"0-63"`},
		{"address outside the blocks", `"addr":"fd00::1"`, `"addr":"fd01::1"`},
		{"address in no block of its pool", `"addr":"fd00::1","pool":"v6"`, `"addr":"fd00::1","pool":"v4"`},
		{"bad queue", `"free":"0,4-63"`, `"free":"0,4-64"`},
		{"bad CIDR", `"cidr":"10.0.0.0/26"`, `"cidr":"10.0.0.1/26"`},
		{"huge block", `"cidr":"10.0.0.0/26"`, `"cidr":"10.0.0.0/8"`},
		{"unspelled attachment", `"attachment":["k8s-pod-network","c3","eth0"]`, `"node":"node-a"`},
		{"not JSON", `{`, `[`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bad := strings.Replace(string(good), c.old, c.new, 1)
			if bad == string(good) {
				t.Fatalf("%q not in %s", c.old, good)
			}
			_, err := store.UnmarshalNode("node-a", []byte(bad))
			if !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("UnmarshalNode(%s) = %v, want ErrCorrupt", bad, err)
			}
		})
	}
}

func FuzzUnmarshalNode(f *testing.F) {
	good, err := store.MarshalNode(exampleNode(f))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"blocks":[],"handles":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := store.UnmarshalNode("node-a", data)
		if err != nil {
			if !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		again, err := store.MarshalNode(n)
		if err != nil {
			t.Fatalf("a decoded object does not encode: %v", err)
		}
		m, err := store.UnmarshalNode("node-a", again)
		if err != nil || !reflect.DeepEqual(m, n) {
			t.Fatalf("re-decoding differs: %v", err)
		}
	})
}

// Example shows what a node object stores: blocks as their free queues,
// ownership said once, by the handle records.
func ExampleMarshalNode() {
	v4 := ipam.Pool{Name: "v4", CIDR: netip.MustParsePrefix("10.0.0.0/24"), BlockSize: 30}
	b := ipam.NewBlock(v4, v4.BlockAt(1), "node-a")
	b, a, _ := b.Assign(v4, "k8s.c1.eth0")
	n := store.Node{Name: "node-a", Blocks: []ipam.Block{b}, Handles: []ipam.Handle{{
		ID: "k8s.c1.eth0", Network: "k8s", ContainerID: "c1", IfName: "eth0", Node: "node-a",
		IPs: []ipam.HandleIP{{Addr: a, Pool: "v4", Block: b.CIDR}},
	}}}
	data, err := store.MarshalNode(n)
	fmt.Println(string(data), err)
	// Output: {"blocks":[{"pool":"v4","cidr":"10.0.0.4/30","free":"1-3"}],"handles":[{"id":"k8s.c1.eth0","ips":[{"addr":"10.0.0.4","pool":"v4"}]}]} <nil>
}

func seq(from, to int) []int {
	var s []int
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

// TestDecodeOverlappingBlocks: an address in two overlapping blocks of
// one pool is the first block's, whatever block the record before it
// used.
func TestDecodeOverlappingBlocks(t *testing.T) {
	small, big := netip.MustParsePrefix("10.0.1.0/26"), netip.MustParsePrefix("10.0.0.0/23")
	spec := store.NodeSpec{
		Blocks: []store.BlockSpec{
			{Pool: "p", CIDR: small, Free: "0-4,6-63"},
			{Pool: "p", CIDR: big, Free: "0-4,6-511"},
		},
		Handles: []store.HandleSpec{
			{ID: "n.a.eth0", IPs: []store.AddrSpec{{Addr: netip.MustParseAddr("10.0.0.5"), Pool: "p"}}},
			{ID: "n.b.eth0", IPs: []store.AddrSpec{{Addr: netip.MustParseAddr("10.0.1.5"), Pool: "p"}}},
		},
	}
	n, err := store.DecodeNode("node-a", spec)
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Handles[0].IPs[0].Block; got != big {
		t.Errorf("10.0.0.5 in block %s, want %s", got, big)
	}
	if got := n.Handles[1].IPs[0].Block; got != small {
		t.Errorf("10.0.1.5 in block %s, want %s (the first holding it)", got, small)
	}
}

// TestMarshalStored: a stored object is encoded as MarshalNode encodes
// it; one never stored is validated first.
func TestMarshalStored(t *testing.T) {
	spec := store.NodeSpec{
		Blocks:  []store.BlockSpec{{Pool: "p", CIDR: netip.MustParsePrefix("10.0.0.0/30"), Free: "1-3"}},
		Handles: []store.HandleSpec{{ID: "n.a.eth0", IPs: []store.AddrSpec{{Addr: netip.MustParseAddr("10.0.0.0"), Pool: "p"}}}},
	}
	n, err := store.DecodeNode("node-a", spec)
	if err != nil {
		t.Fatal(err)
	}
	want, err := store.MarshalNode(n)
	if err != nil {
		t.Fatal(err)
	}
	got, err := store.MarshalStored(store.AsStored(n, store.Parts{Head: "1"}))
	if err != nil || string(got) != string(want) {
		t.Fatalf("MarshalStored = %s, %v; want %s", got, err, want)
	}
	bad := n
	bad.Handles = []ipam.Handle{n.Handles[0], n.Handles[0]}
	if b, err := store.MarshalStored(bad); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("MarshalStored of a record held twice, never stored = %s, %v; want ErrInvalid", b, err)
	}
}
