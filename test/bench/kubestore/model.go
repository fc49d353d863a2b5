package main

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// The prototype objects' specs: what a block or a node's allocations
// would hold in the Kubernetes datastore. Only the bench uses them; they
// are a measurement of sizes and write costs, not the design's API.

// owner is a self-describing owner record of one address in a block
// object: the handle and everything DEL, GC and the controller need to
// decide about it without another object.
type owner struct {
	Handle      string    `json:"handle"`
	Node        string    `json:"node,omitempty"`
	Network     string    `json:"network,omitempty"`
	ContainerID string    `json:"containerID,omitempty"`
	IfName      string    `json:"ifname,omitempty"`
	Namespace   string    `json:"namespace,omitempty"`
	Pod         string    `json:"pod,omitempty"`
	PodUID      string    `json:"podUID,omitempty"`
	NetNS       string    `json:"netns,omitempty"`
	Created     time.Time `json:"created,omitzero"`
}

// compact is the owner record as today's ipam.Block keeps it: the handle
// ID alone.
func (o owner) compact() owner { return owner{Handle: o.Handle} }

// blockSpec is the spec of a ProtoBlock: one block with its owners.
type blockSpec struct {
	CIDR   string           `json:"cidr"`
	Pool   string           `json:"pool"`
	Node   string           `json:"node,omitempty"`
	Owners map[string]owner `json:"owners,omitempty"`
	Free   []int            `json:"free"`
}

// nodeBlock is one block inside a ProtoNode: owners name handles only.
type nodeBlock struct {
	CIDR   string            `json:"cidr"`
	Pool   string            `json:"pool"`
	Owners map[string]string `json:"owners,omitempty"`
	Free   []int             `json:"free"`
}

// handleIP is one address of a handle record.
type handleIP struct {
	Addr  string `json:"addr"`
	Pool  string `json:"pool"`
	Block string `json:"block"`
}

// handleRec is a handle record inside a ProtoNode.
type handleRec struct {
	Network     string     `json:"network"`
	ContainerID string     `json:"containerID"`
	IfName      string     `json:"ifname"`
	Namespace   string     `json:"namespace,omitempty"`
	Pod         string     `json:"pod,omitempty"`
	PodUID      string     `json:"podUID,omitempty"`
	NetNS       string     `json:"netns,omitempty"`
	Node        string     `json:"node"`
	Created     time.Time  `json:"created"`
	IPs         []handleIP `json:"ips"`
}

// nodeSpec is the spec of a ProtoNode: every block of one node (or, in
// the shared variant, of all nodes) keyed by block name, and the handles.
type nodeSpec struct {
	Node    string               `json:"node"`
	Blocks  map[string]nodeBlock `json:"blocks"`
	Handles map[string]handleRec `json:"handles,omitempty"`
}

// objName derives an object name from a CIDR: '.', ':' and '/' become '-', and
// a leading '-' (an IPv6 address starting with "::") gets a '0' in front,
// so the name is a legal DNS-1123 subdomain and the mapping reverses.
func objName(p netip.Prefix) string {
	n := strings.NewReplacer(".", "-", ":", "-", "/", "-").Replace(p.Masked().String())
	if strings.HasPrefix(n, "-") {
		n = "0" + n
	}
	return n
}

var seqN atomic.Int64

// newOwner makes a realistic owner record: a 64-hex container ID, a pod
// name and namespace, a pod UID and a netns path as a runtime gives them.
func newOwner(node string) owner {
	seq := seqN.Add(1)
	cid := fmt.Sprintf("%064x", uint64(seq)*0x9e3779b97f4a7c15)
	return owner{
		Handle:      "default-network." + cid + ".eth0",
		Node:        node,
		Network:     "default-network",
		ContainerID: cid,
		IfName:      "eth0",
		Namespace:   "team-frontend-prod",
		Pod:         fmt.Sprintf("checkout-service-7c9f8d6b5-%05d", seq%100000),
		PodUID:      fmt.Sprintf("%08x-1b2c-4d3e-8f40-%012x", seq, seq),
		NetNS:       "/var/run/netns/cni-" + fmt.Sprintf("%08x-aaaa-bbbb-cccc-%012x", seq, seq),
		Created:     time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(seq) * time.Second),
	}
}

func (o owner) record(ips []handleIP) handleRec {
	return handleRec{Network: o.Network, ContainerID: o.ContainerID, IfName: o.IfName, Namespace: o.Namespace,
		Pod: o.Pod, PodUID: o.PodUID, NetNS: o.NetNS, Node: o.Node, Created: o.Created, IPs: ips}
}

func freeQueue(n int) []int {
	f := make([]int, n)
	for i := range f {
		f[i] = i
	}
	return f
}

// newBlock returns an empty block spec of cidr for node.
func newBlock(cidr netip.Prefix, node string) blockSpec {
	return blockSpec{CIDR: cidr.String(), Pool: "pool-" + famName(cidr), Node: node, Owners: map[string]owner{}, Free: freeQueue(1 << (cidr.Addr().BitLen() - cidr.Bits()))}
}

func famName(p netip.Prefix) string {
	if p.Addr().Is4() {
		return "v4"
	}
	return "v6"
}

func (b blockSpec) clone() blockSpec {
	b.Owners = maps.Clone(b.Owners)
	if b.Owners == nil {
		b.Owners = map[string]owner{}
	}
	b.Free = slices.Clone(b.Free)
	return b
}

// assign gives the first free ordinal to o; false when full.
func (b *blockSpec) assign(o owner) bool {
	if len(b.Free) == 0 {
		return false
	}
	b.Owners[strconv.Itoa(b.Free[0])] = o
	b.Free = b.Free[1:]
	return true
}

// releaseOldest frees the owner created first (FIFO churn).
func (b *blockSpec) releaseOldest() {
	var oldest string
	for k, o := range b.Owners {
		if oldest == "" || o.Created.Before(b.Owners[oldest].Created) {
			oldest = k
		}
	}
	if oldest == "" {
		return
	}
	delete(b.Owners, oldest)
	ord, _ := strconv.Atoi(oldest)
	b.Free = append(b.Free, ord)
}

// nodeCIDRs returns node i's v4 /26 and v6 /122 blocks (k-th of each).
func nodeCIDRs(i, k int) (netip.Prefix, netip.Prefix) {
	v4 := netip.AddrFrom4([4]byte{10, byte((i * 4) >> 8), byte(i*4 + k), 0})
	var a [16]byte
	a[0], a[1], a[3] = 0xfd, 0x00, 0x22
	a[12], a[13], a[14] = byte(i>>8), byte(i), byte(k)
	return netip.PrefixFrom(v4, 26), netip.PrefixFrom(netip.AddrFrom16(a), 122)
}

// newNode returns a ProtoNode spec holding node i's blocks (blocks of
// each family) under keys prefix+block name; the shared variant puts many
// nodes' blocks in one spec, each node's under its own prefix.
func (s *nodeSpec) addNode(prefix, node string, i, blocks int) {
	for k := range blocks {
		for _, p := range []netip.Prefix{first(nodeCIDRs(i, k)), second(nodeCIDRs(i, k))} {
			b := newBlock(p, node)
			s.Blocks[prefix+objName(p)] = nodeBlock{CIDR: b.CIDR, Pool: b.Pool, Owners: map[string]string{}, Free: b.Free}
		}
	}
}

func first(a, _ netip.Prefix) netip.Prefix  { return a }
func second(_, b netip.Prefix) netip.Prefix { return b }

func (s nodeSpec) clone() nodeSpec {
	c := nodeSpec{Node: s.Node, Blocks: make(map[string]nodeBlock, len(s.Blocks)), Handles: maps.Clone(s.Handles)}
	for k, b := range s.Blocks {
		b.Owners = maps.Clone(b.Owners)
		b.Free = slices.Clone(b.Free)
		c.Blocks[k] = b
	}
	if c.Handles == nil {
		c.Handles = map[string]handleRec{}
	}
	return c
}

// handlesOf counts node's handles in s.
func (s nodeSpec) handlesOf(node string) int {
	n := 0
	for _, h := range s.Handles {
		if h.Node == node {
			n++
		}
	}
	return n
}

// assignDual gives o one address of each family from the blocks under
// prefix, recording one handle: a dual-stack ADD in one write. It returns
// the block keys it changed.
func (s *nodeSpec) assignDual(prefix string, o owner) ([]string, bool) {
	var ips []handleIP
	var changed []string
	for _, fam := range []string{"v4", "v6"} {
		ok := false
		for _, k := range slices.Sorted(maps.Keys(s.Blocks)) {
			b := s.Blocks[k]
			if b.Pool != "pool-"+fam || len(b.Free) == 0 || !strings.HasPrefix(k, prefix) {
				continue
			}
			b.Owners[strconv.Itoa(b.Free[0])] = o.Handle
			ips = append(ips, handleIP{Addr: "ordinal-" + strconv.Itoa(b.Free[0]), Pool: b.Pool, Block: b.CIDR})
			b.Free = b.Free[1:]
			s.Blocks[k] = b
			changed = append(changed, k)
			ok = true
			break
		}
		if !ok {
			return nil, false
		}
	}
	s.Handles[o.Handle] = o.record(ips)
	return changed, true
}

// releaseOldest releases node's oldest handle: both addresses, one write.
// It returns the handle and the block keys it changed.
func (s *nodeSpec) releaseOldest(node string) (string, []string) {
	var oldest string
	for id, h := range s.Handles {
		if h.Node != node {
			continue
		}
		if oldest == "" || h.Created.Before(s.Handles[oldest].Created) {
			oldest = id
		}
	}
	if oldest == "" {
		return "", nil
	}
	var changed []string
	for k, b := range s.Blocks {
		for ord, id := range b.Owners {
			if id == oldest {
				delete(b.Owners, ord)
				n, _ := strconv.Atoi(ord)
				b.Free = append(b.Free, n)
				changed = append(changed, k)
			}
		}
		s.Blocks[k] = b
	}
	delete(s.Handles, oldest)
	return oldest, changed
}
