package calico

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/ipkeeper/ipkeeper/internal/importer"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// Options say how Calico's state maps onto ipkeeper pools and handles.
type Options struct {
	// PoolCIDRs are the CIDRs of Calico's IPPools. Blocks inside one
	// become blocks of one ipkeeper pool named PoolName(cidr); a block in
	// none becomes a pool of its own (its CIDR, its size).
	PoolCIDRs []netip.Prefix
	// IfName completes Calico's "<network>.<container ID>" handle IDs into
	// ipkeeper's "<network>.<container ID>.<ifname>", so that the CNI DEL
	// of a running pod, once ipkeeper is its IPAM, releases the imported
	// handle. It must be a name a runtime can pass as CNI_IFNAME
	// (CheckIfName). Default "eth0".
	IfName string
}

// ErrInvalidOption means an Options field cannot work.
var ErrInvalidOption = errors.New("invalid Calico import option")

// CheckIfName reports why name cannot be the interface name of a CNI
// attachment, by the rule runtimes (libcni) apply to CNI_IFNAME: 1 to 15
// bytes, not "." or "..", without '/', ':' or white space. Handles named
// with any other interface name would never be matched by a CNI DEL.
func CheckIfName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: interface name is empty", ErrInvalidOption)
	case len(name) > maxIfNameBytes:
		return fmt.Errorf("%w: interface name %q is %d bytes, longer than %d", ErrInvalidOption, name, len(name), maxIfNameBytes)
	case name == "." || name == "..":
		return fmt.Errorf("%w: interface name %q is a directory name (. or ..) and cannot be an interface", ErrInvalidOption, name)
	case strings.ContainsFunc(name, func(r rune) bool { return r == '/' || r == ':' || unicode.IsSpace(r) }):
		return fmt.Errorf("%w: interface name %q contains '/', ':' or white space", ErrInvalidOption, name)
	}
	return nil
}

// maxIfNameBytes is the kernel's IFNAMSIZ less the terminating NUL.
const maxIfNameBytes = 15

// PoolName is the name of the ipkeeper pool made for a Calico IPPool (or
// block) CIDR: "calico-" and the CIDR with '/' and ':' replaced by '-'.
func PoolName(cidr netip.Prefix) string {
	return "calico-" + strings.NewReplacer("/", "-", ":", "-").Replace(cidr.Masked().String())
}

// UnknownHandlePrefix starts the ID of the handle made for an allocation
// Calico recorded without a handle ID: the address stays taken, owned by
// "calico-import.unknown.<addr>", until someone releases it.
const UnknownHandlePrefix = "calico-import.unknown."

// allocationBlock is Calico's AllocationBlock as stored in etcd.
type allocationBlock struct {
	CIDR           string  `json:"cidr"`
	Affinity       *string `json:"affinity"`
	StrictAffinity bool    `json:"strictAffinity"`
	// Allocations[i] indexes Attributes for address CIDR+i; nil is free.
	Allocations []*int `json:"allocations"`
	// Unallocated lists the free ordinals in the order Calico hands them out.
	Unallocated []int `json:"unallocated"`
	Attributes  []struct {
		HandleID  *string         `json:"handle_id"`
		Secondary json.RawMessage `json:"secondary"`
	} `json:"attributes"`
	Deleted bool `json:"deleted"`
}

// handleValue is Calico's IPAM handle: per block CIDR, how many addresses
// of the block the handle holds.
type handleValue struct {
	HandleID string         `json:"handleID"`
	Block    map[string]int `json:"block"`
	Deleted  bool           `json:"deleted"`
}

// state is Calico's IPAM state sorted by kind.
type state struct {
	blocks  []allocationBlock
	handles map[string]handleValue
	// hosts maps a block CIDR to the host whose affinity record names it.
	hosts map[netip.Prefix]string
}

// Plan turns Calico's entries into an import plan.
func Plan(kvs []KV, opts Options) (*importer.Plan, error) {
	if opts.IfName == "" {
		opts.IfName = "eth0"
	}
	if err := CheckIfName(opts.IfName); err != nil {
		return nil, fmt.Errorf("ifname: %w", err)
	}
	b := importer.NewBuilder("calico")
	st, err := sortOut(kvs, b)
	if err != nil {
		return nil, err
	}
	if len(st.blocks) == 0 {
		return nil, fmt.Errorf("%w: no Calico allocation block found (keys %sassignment/ipv4/block/... or block values with \"cidr\" and \"allocations\")", importer.ErrInvalidSource, Prefix)
	}
	counts := map[string]map[string]int{} // Calico handle ID → block → addresses
	for _, blk := range st.blocks {
		if err := addBlock(b, blk, st.hosts, opts, counts); err != nil {
			return nil, err
		}
	}
	for _, id := range slices.Sorted(maps.Keys(st.handles)) {
		h := st.handles[id]
		for _, cidr := range slices.Sorted(maps.Keys(h.Block)) {
			p, err := netip.ParsePrefix(cidr)
			if err != nil || !slices.ContainsFunc(st.blocks, func(x allocationBlock) bool { return x.CIDR == p.String() }) {
				continue // a block not in the input: nothing to compare
			}
			if got := counts[id][p.String()]; got != h.Block[cidr] {
				b.Warn("Calico handle %s records %d addresses in block %s, the block gives it %d; the block is what was imported", id, h.Block[cidr], cidr, got)
			}
		}
	}
	return b.Plan()
}

// sortOut decodes the entries by kind.
func sortOut(kvs []KV, b *importer.Builder) (*state, error) {
	st := &state{handles: map[string]handleValue{}, hosts: map[netip.Prefix]string{}}
	for i, e := range kvs {
		key := strings.TrimPrefix(e.Key, Prefix)
		kind := keyKind(key)
		if kind == "" && e.Key == "" {
			kind = shapeKind(e.Value)
		}
		name := e.Key
		if name == "" {
			name = fmt.Sprintf("value %d", i+1)
		}
		switch kind {
		case "block":
			var blk allocationBlock
			if err := json.Unmarshal(e.Value, &blk); err != nil {
				return nil, fmt.Errorf("%w: %s: %v", importer.ErrInvalidSource, name, err)
			}
			st.blocks = append(st.blocks, blk)
		case "handle":
			var h handleValue
			if err := json.Unmarshal(e.Value, &h); err != nil {
				return nil, fmt.Errorf("%w: %s: %v", importer.ErrInvalidSource, name, err)
			}
			if h.HandleID == "" {
				h.HandleID = strings.TrimPrefix(key, "handle/")
			}
			st.handles[h.HandleID] = h
		case "host":
			// host/<host>/ipv4/block/<cidr with - for />
			parts := strings.Split(key, "/")
			cidr, ok := blockName(parts[len(parts)-1])
			if !ok {
				b.Warn("skipped host affinity %s: cannot read its block", e.Key)
				continue
			}
			st.hosts[cidr] = parts[1]
		default:
			b.Warn("skipped %s: not a Calico block, handle or host affinity", name)
		}
	}
	return st, nil
}

func keyKind(key string) string {
	parts := strings.Split(key, "/")
	switch {
	case len(parts) == 4 && parts[0] == "assignment" && parts[2] == "block":
		return "block"
	case len(parts) >= 2 && parts[0] == "handle":
		return "handle"
	case len(parts) == 5 && parts[0] == "host" && parts[3] == "block":
		return "host"
	}
	return ""
}

func shapeKind(v []byte) string {
	var probe map[string]json.RawMessage
	if json.Unmarshal(v, &probe) != nil {
		return ""
	}
	if _, ok := probe["allocations"]; ok {
		if _, ok := probe["cidr"]; ok {
			return "block"
		}
	}
	if _, ok := probe["handleID"]; ok {
		return "handle"
	}
	return ""
}

func blockName(s string) (netip.Prefix, bool) {
	i := strings.LastIndexByte(s, '-')
	if i < 0 {
		return netip.Prefix{}, false
	}
	p, err := netip.ParsePrefix(s[:i] + "/" + s[i+1:])
	return p.Masked(), err == nil
}

// addBlock adds one Calico block, its pool and the handles it names.
func addBlock(b *importer.Builder, blk allocationBlock, hosts map[netip.Prefix]string, opts Options, counts map[string]map[string]int) error {
	cidr, err := netip.ParsePrefix(blk.CIDR)
	if err != nil || cidr != cidr.Masked() {
		return fmt.Errorf("%w: block cidr %q is not a network prefix", importer.ErrInvalidSource, blk.CIDR)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: block %s: %s", importer.ErrInvalidSource, cidr, fmt.Sprintf(format, args...))
	}
	if hb := cidr.Addr().BitLen() - cidr.Bits(); hb > ipam.MaxBlockHostBits {
		return bad("larger than ipkeeper's largest block (/%d)", cidr.Addr().BitLen()-ipam.MaxBlockHostBits)
	}
	pool := ipam.Pool{Name: PoolName(cidr), CIDR: cidr, BlockSize: cidr.Bits(), StrictAffinity: blk.StrictAffinity}
	for _, pc := range opts.PoolCIDRs {
		if pc.Masked().Contains(cidr.Addr()) && pc.Bits() <= cidr.Bits() {
			pool = ipam.Pool{Name: PoolName(pc), CIDR: pc.Masked(), BlockSize: cidr.Bits(), StrictAffinity: blk.StrictAffinity}
			break
		}
	}
	if pool, err = b.Pool(pool); err != nil {
		return fmt.Errorf("block %s: %w (Calico blocks of one IP pool have one size)", cidr, err)
	}
	node := hosts[cidr]
	if blk.Affinity != nil {
		if host, ok := strings.CutPrefix(*blk.Affinity, "host:"); ok {
			node = host
		} else {
			b.Warn("block %s: affinity %q is not a host; imported without a node", cidr, *blk.Affinity)
			node = ""
		}
	}
	if strings.Contains(node, "/") {
		return bad("affinity host %q contains '/'", node)
	}
	out := ipam.Block{CIDR: cidr, Pool: pool.Name, Node: node, Owners: map[int]string{}}
	size := out.Size()
	if len(blk.Allocations) != size {
		return bad("has %d allocation entries for %d addresses", len(blk.Allocations), size)
	}
	if blk.Deleted {
		b.Warn("block %s is marked deleted in Calico; imported as it is", cidr)
	}
	for ord, ai := range blk.Allocations {
		if ai == nil {
			continue
		}
		if *ai < 0 || *ai >= len(blk.Attributes) {
			return bad("allocation %d names attribute %d of %d", ord, *ai, len(blk.Attributes))
		}
		attr := blk.Attributes[*ai]
		addr := out.Addr(ord)
		h := handleFor(attr.HandleID, addr, opts.IfName)
		if h.Node == "" {
			h.Node = node
		}
		secondary(&h, attr.Secondary)
		out.Owners[ord] = h.ID
		b.Handle(h, ipam.HandleIP{Addr: addr, Pool: pool.Name, Block: cidr})
		if attr.HandleID != nil {
			if counts[*attr.HandleID] == nil {
				counts[*attr.HandleID] = map[string]int{}
			}
			counts[*attr.HandleID][cidr.String()]++
		}
	}
	// Calico's free order, then any ordinal Calico forgot in both lists
	// (nothing claims it) at the back.
	seen := map[int]bool{}
	for _, ord := range blk.Unallocated {
		if ord < 0 || ord >= size || seen[ord] || blk.Allocations[ord] != nil {
			continue
		}
		seen[ord] = true
		out.Free = append(out.Free, ord)
	}
	for ord := range size {
		if !seen[ord] && blk.Allocations[ord] == nil {
			out.Free = append(out.Free, ord)
		}
	}
	b.Block(out)
	return nil
}

// handleFor maps a Calico handle ID to an ipkeeper handle.
func handleFor(calicoID *string, addr netip.Addr, ifname string) ipam.Handle {
	if calicoID == nil || *calicoID == "" {
		return ipam.Handle{ID: UnknownHandlePrefix + addr.String(), Network: "calico-import"}
	}
	id := *calicoID
	if i := strings.LastIndexByte(id, '.'); i > 0 && i < len(id)-1 {
		return ipam.Handle{ID: ipam.HandleID(id[:i], id[i+1:], ifname), Network: id[:i], ContainerID: id[i+1:], IfName: ifname}
	}
	// Not a pod's handle (a tunnel address, say): keep Calico's ID.
	return ipam.Handle{ID: id}
}

// secondary copies Calico's attributes (namespace, pod, node, timestamp).
func secondary(h *ipam.Handle, raw json.RawMessage) {
	var attrs map[string]string
	if len(raw) == 0 || json.Unmarshal(raw, &attrs) != nil {
		return
	}
	h.Namespace, h.Pod = attrs["namespace"], attrs["pod"]
	if n := attrs["node"]; n != "" {
		h.Node = n
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05.999999999 -0700 MST"} {
		if t, err := time.Parse(layout, attrs["timestamp"]); err == nil {
			h.Created = t.UTC()
			break
		}
	}
}
