package store

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// The encoding of a node object (NodeSpec) is what every backend stores:
// the value under an etcd or bbolt key, the spec of a Kubernetes object.
// It holds nothing twice, since an object's size is what its writes cost
// (docs/STORAGE.md): a block is its pool, CIDR and free queue; who owns an
// address is said once, by the handle record listing it.

// NodeSpec is the stored form of a node object.
type NodeSpec struct {
	Blocks  []BlockSpec  `json:"blocks"`
	Handles []HandleSpec `json:"handles"`
	Loans   []LoanSpec   `json:"loans,omitempty"`
}

// LoanSpec is the stored form of a loan.
type LoanSpec struct {
	Handle string `json:"handle"`
	Lender string `json:"lender"`
}

// BlockSpec is the stored form of one block of a node object.
type BlockSpec struct {
	Pool string       `json:"pool"`
	CIDR netip.Prefix `json:"cidr"`
	// Free is the free queue, in order, as comma-separated ordinals and
	// ascending runs ("2-63,0,1"); empty when the block is full.
	Free string `json:"free"`
}

// HandleSpec is the stored form of one handle record.
type HandleSpec struct {
	ID string `json:"id"`
	// Attachment holds network, container ID and interface name when the
	// ID does not spell them (ipam.ParseHandleID); absent otherwise.
	Attachment *[3]string `json:"attachment,omitempty"`
	// Node is the handle's node when it is not the object's (borrowed).
	Node      string     `json:"node,omitempty"`
	NetNS     string     `json:"netns,omitempty"`
	Namespace string     `json:"namespace,omitempty"`
	Pod       string     `json:"pod,omitempty"`
	PodUID    string     `json:"podUID,omitempty"`
	Sticky    string     `json:"sticky,omitempty"`
	Created   time.Time  `json:"created,omitzero"`
	Parked    time.Time  `json:"parked,omitzero"`
	IPs       []AddrSpec `json:"ips"`
}

// AddrSpec is one address of a handle record, in a block of its pool.
type AddrSpec struct {
	Addr netip.Addr `json:"addr"`
	Pool string     `json:"pool"`
}

// EncodeNode validates n and returns its stored form, or an error wrapping
// ErrInvalid.
func EncodeNode(n Node) (NodeSpec, error) {
	if err := n.Validate(); err != nil {
		return NodeSpec{}, err
	}
	return encodeNode(n), nil
}

// encodeNode is EncodeNode without the validation.
func encodeNode(n Node) NodeSpec {
	spec := NodeSpec{Blocks: make([]BlockSpec, len(n.Blocks)), Handles: make([]HandleSpec, len(n.Handles))}
	// Every record's addresses, in one allocation.
	nIPs := 0
	for _, h := range n.Handles {
		nIPs += len(h.IPs)
	}
	addrs := make([]AddrSpec, 0, nIPs)
	for i, b := range n.Blocks {
		spec.Blocks[i] = BlockSpec{Pool: b.Pool, CIDR: b.CIDR, Free: FormatQueue(b.Free)}
	}
	for i, h := range n.Handles {
		hs := encodeAttributes(h, n.Name)
		start := len(addrs)
		for _, ip := range h.IPs {
			addrs = append(addrs, AddrSpec{Addr: ip.Addr, Pool: ip.Pool})
		}
		hs.IPs = addrs[start:len(addrs):len(addrs)]
		spec.Handles[i] = hs
	}
	for _, l := range n.Loans {
		spec.Loans = append(spec.Loans, LoanSpec(l))
	}
	return spec
}

// EncodeHandle returns the stored form of record h of node object node.
func EncodeHandle(h ipam.Handle, node string) HandleSpec {
	hs := encodeAttributes(h, node)
	hs.IPs = make([]AddrSpec, len(h.IPs))
	for i, ip := range h.IPs {
		hs.IPs[i] = AddrSpec{Addr: ip.Addr, Pool: ip.Pool}
	}
	return hs
}

// encodeAttributes is EncodeHandle without the addresses.
func encodeAttributes(h ipam.Handle, node string) HandleSpec {
	hs := HandleSpec{ID: h.ID, NetNS: h.NetNS, Namespace: h.Namespace, Pod: h.Pod, PodUID: h.PodUID, Sticky: h.Sticky, Created: h.Created, Parked: h.Parked}
	if nw, c, ifn, ok := ipam.ParseHandleID(h.ID); !ok || nw != h.Network || c != h.ContainerID || ifn != h.IfName {
		hs.Attachment = &[3]string{h.Network, h.ContainerID, h.IfName}
	}
	if h.Node != node {
		hs.Node = h.Node
	}
	return hs
}

// MarshalNode is EncodeNode as JSON.
func MarshalNode(n Node) ([]byte, error) {
	spec, err := EncodeNode(n)
	if err != nil {
		return nil, err
	}
	// appendNodeSpec writes what json.Marshal(spec) does, faster.
	return appendNodeSpec(make([]byte, 0, nodeSpecSizeHint(&spec)), &spec)
}

// MarshalStored is MarshalNode of a node object as a backend read or
// wrote it, without validating it again: its read validated it whole,
// its write what changed (Changes). An object never stored is validated.
// What it writes is decoded by UnmarshalNode, which validates it whole.
func MarshalStored(n Node) ([]byte, error) {
	if n.stored == nil {
		return MarshalNode(n)
	}
	spec := encodeNode(n)
	return appendNodeSpec(make([]byte, 0, nodeSpecSizeHint(&spec)), &spec)
}

// DecodeNode rebuilds the node object name from its stored form: block
// owners from the handle records, each address's block from the object's
// blocks. A spec that does not make a valid node object is refused with an
// error wrapping ErrCorrupt.
func DecodeNode(name string, spec NodeSpec) (Node, error) {
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("%w: node object %q: %s", ErrCorrupt, name, fmt.Sprintf(format, args...))
	}
	n := Node{Name: name, Blocks: make([]ipam.Block, len(spec.Blocks)), Handles: make([]ipam.Handle, len(spec.Handles))}
	// Every record's addresses, in one allocation; each record's slice
	// is capped, so that appending to it copies.
	nIPs := 0
	for _, hs := range spec.Handles {
		nIPs += len(hs.IPs)
	}
	ips := make([]ipam.HandleIP, 0, nIPs)
	var last []int
	for i, bs := range spec.Blocks {
		if !bs.CIDR.IsValid() || bs.CIDR != bs.CIDR.Masked() || bs.CIDR.Addr().BitLen()-bs.CIDR.Bits() > ipam.MaxBlockHostBits {
			return Node{}, corrupt("block %q of pool %q: not a masked prefix of at most 2^%d addresses", bs.CIDR, bs.Pool, ipam.MaxBlockHostBits)
		}
		size := 1 << (bs.CIDR.Addr().BitLen() - bs.CIDR.Bits())
		free, err := ParseQueue(bs.Free, size)
		if err != nil {
			return Node{}, corrupt("block %s of pool %q: %v", bs.CIDR, bs.Pool, err)
		}
		n.Blocks[i] = ipam.Block{CIDR: bs.CIDR, Pool: bs.Pool, Node: name, Free: free}
	}
	overlap := overlapping(n.Blocks)
	for i, hs := range spec.Handles {
		h := ipam.Handle{ID: hs.ID, Node: hs.Node, NetNS: hs.NetNS, Namespace: hs.Namespace, Pod: hs.Pod, PodUID: hs.PodUID, Sticky: hs.Sticky, Created: hs.Created, Parked: hs.Parked}
		if h.Node == "" {
			h.Node = name
		}
		if hs.Attachment != nil {
			h.Network, h.ContainerID, h.IfName = hs.Attachment[0], hs.Attachment[1], hs.Attachment[2]
		} else {
			var ok bool
			if h.Network, h.ContainerID, h.IfName, ok = ipam.ParseHandleID(hs.ID); !ok {
				return Node{}, corrupt("handle %q: the ID does not name its attachment and none is recorded", hs.ID)
			}
		}
		start := len(ips)
		ips = append(ips, make([]ipam.HandleIP, len(hs.IPs))...)
		h.IPs = ips[start:len(ips):len(ips)]
		for j, a := range hs.IPs {
			h.IPs[j] = ipam.HandleIP{Addr: a.Addr, Pool: a.Pool}
			// The block of the previous record's j-th address first:
			// records are mostly in the order their blocks filled.
			if j == len(last) {
				last = append(last, 0)
			}
			if bi := blockOf(n.Blocks, a, last[j], overlap); bi >= 0 {
				last[j] = bi
				b := &n.Blocks[bi]
				h.IPs[j].Block = b.CIDR
				ord, _ := b.Ordinal(a.Addr)
				if b.Owners == nil {
					// Sized for the addresses not free: the owners of a
					// valid block.
					b.Owners = make(map[int]string, max(0, b.Size()-len(b.Free)))
				}
				if other, taken := b.Owners[ord]; taken {
					return Node{}, corrupt("%s held by handles %q and %q", a.Addr, other, hs.ID)
				}
				b.Owners[ord] = hs.ID
			}
		}
		n.Handles[i] = h
	}
	for _, l := range spec.Loans {
		n.Loans = append(n.Loans, Loan(l))
	}
	if err := n.Validate(); err != nil {
		return Node{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return n, nil
}

// blockOf returns the index of the first block of blocks holding a; -1
// when none does. Unless two blocks of a pool overlap (where the first
// must win), it looks at blocks[hint] first.
func blockOf(blocks []ipam.Block, a AddrSpec, hint int, overlap bool) int {
	if !overlap && hint < len(blocks) && blocks[hint].Pool == a.Pool && blocks[hint].CIDR.Contains(a.Addr) {
		return hint
	}
	for i := range blocks {
		if blocks[i].Pool == a.Pool && blocks[i].CIDR.Contains(a.Addr) {
			return i
		}
	}
	return -1
}

// overlapping reports whether two blocks of one pool overlap.
func overlapping(blocks []ipam.Block) bool {
	sorted := slices.SortedFunc(slices.Values(blocks), func(a, b ipam.Block) int {
		return cmp.Or(strings.Compare(a.Pool, b.Pool), a.CIDR.Addr().Compare(b.CIDR.Addr()))
	})
	for i := 1; i < len(sorted); i++ {
		if sorted[i].Pool == sorted[i-1].Pool && sorted[i-1].CIDR.Overlaps(sorted[i].CIDR) {
			return true
		}
	}
	return false
}

// UnmarshalNode is DecodeNode of JSON.
func UnmarshalNode(name string, data []byte) (Node, error) {
	// parseNodeSpec reads the plain JSON appendNodeSpec writes as
	// json.Unmarshal does, faster; anything else is json.Unmarshal's.
	spec, ok := parseNodeSpec(data)
	if !ok {
		if err := json.Unmarshal(data, &spec); err != nil {
			return Node{}, fmt.Errorf("%w: node object %q: %v", ErrCorrupt, name, err)
		}
	}
	return DecodeNode(name, spec)
}

// FormatQueue writes a free queue as comma-separated ordinals, each
// ascending run of two or more consecutive ordinals as "first-last".
func FormatQueue(q []int) string {
	var b strings.Builder
	for i := 0; i < len(q); {
		j := i
		for j+1 < len(q) && q[j+1] == q[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(q[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(q[j]))
		}
		i = j + 1
	}
	return b.String()
}

// errQueue is wrapped by every ParseQueue error.
var errQueue = errors.New("bad free queue")

// ParseQueue reads what FormatQueue writes, for a block of size addresses:
// every ordinal in [0, size), each at most once, runs ascending.
func ParseQueue(s string, size int) ([]int, error) {
	if s == "" {
		return []int{}, nil
	}
	out := []int{}
	seen := make([]bool, size)
	for tok := range strings.SplitSeq(s, ",") {
		first, last, isRun := strings.Cut(tok, "-")
		a, err := ordinal(first, size)
		if err != nil {
			return nil, err
		}
		z := a
		if isRun {
			if z, err = ordinal(last, size); err != nil {
				return nil, err
			}
			if z <= a {
				return nil, fmt.Errorf("%w: run %q does not ascend", errQueue, tok)
			}
		}
		for o := a; o <= z; o++ {
			if seen[o] {
				return nil, fmt.Errorf("%w: ordinal %d twice", errQueue, o)
			}
			seen[o] = true
			out = append(out, o)
		}
	}
	return out, nil
}

func ordinal(s string, size int) (int, error) {
	if s == "" || len(s) > 1 && s[0] == '0' || strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' }) >= 0 || len(s) > 7 {
		return 0, fmt.Errorf("%w: %q is not an ordinal", errQueue, s)
	}
	o, _ := strconv.Atoi(s)
	if o >= size {
		return 0, fmt.Errorf("%w: ordinal %d outside the block's %d addresses", errQueue, o, size)
	}
	return o, nil
}
