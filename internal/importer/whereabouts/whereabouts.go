// Package whereabouts reads whereabouts IPPool objects (as `kubectl get
// ippools.whereabouts.cni.cncf.io -A -o yaml` prints them) and turns their
// allocations into an importer.Plan. NetworkAttachmentDefinitions in the
// same input tell the CNI network name each pool's pods were attached
// with, which ipkeeper handle IDs start with.
package whereabouts

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"net/netip"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/ipkeeper/ipkeeper/internal/importer"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/netpools"
)

// DefaultNetwork is the network name handles get when neither Options nor
// a NetworkAttachmentDefinition in the input says which network a pool
// served.
const DefaultNetwork = "whereabouts"

// Options say how whereabouts' state maps onto ipkeeper.
type Options struct {
	// Network is the CNI network name of the pods (under Multus, the
	// NetworkAttachmentDefinition's name). It overrides what
	// NetworkAttachmentDefinitions in the input say.
	Network string
	// BlockSize and BlockSizeV6 are the ipam config's blockSize and
	// ipv6BlockSize; 0 means the defaults, as in the network config.
	BlockSize, BlockSizeV6 int
}

type object struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Items []json.RawMessage `json:"items"`
	Spec  json.RawMessage   `json:"spec"`
}

type ipPoolSpec struct {
	Range       string                `json:"range"`
	Allocations map[string]allocation `json:"allocations"`
}

type allocation struct {
	ID     string `json:"id"`
	PodRef string `json:"podref"`
	IfName string `json:"ifname"`
}

type ipPool struct {
	name, namespace string
	spec            ipPoolSpec
}

// Plan reads every document of every file and returns the plan of all
// IPPools found. A file over importer.MaxSourceBytes, or nesting deeper
// than importer.MaxNesting, is refused before any is decoded.
func Plan(files [][]byte, opts Options) (*importer.Plan, error) {
	for i, f := range files {
		if err := importer.CheckSource(fmt.Sprintf("input %d", i+1), f); err != nil {
			return nil, err
		}
	}
	var pools []ipPool
	nets := networks{}
	for _, f := range files {
		for _, doc := range splitDocuments(f) {
			js, err := yaml.YAMLToJSON(doc)
			if err != nil {
				return nil, fmt.Errorf("%w: %v", importer.ErrInvalidSource, err)
			}
			if err := collect(js, &pools, nets); err != nil {
				return nil, err
			}
		}
	}
	if len(pools) == 0 {
		return nil, fmt.Errorf("%w: no whereabouts IPPool object found", importer.ErrInvalidSource)
	}
	b := importer.NewBuilder("whereabouts")
	seen := map[string]bool{}
	for _, p := range pools {
		if seen[p.namespace+"/"+p.name] {
			return nil, fmt.Errorf("%w: IPPool %s/%s appears twice", importer.ErrInvalidSource, p.namespace, p.name)
		}
		seen[p.namespace+"/"+p.name] = true
		if err := addPool(b, p, nets, opts); err != nil {
			return nil, err
		}
	}
	return b.Plan()
}

// splitDocuments splits a YAML stream at "---" lines.
func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	var cur []byte
	for line := range bytes.Lines(data) {
		if t := bytes.TrimRight(line, " \t\r\n"); bytes.Equal(t, []byte("---")) || bytes.HasPrefix(t, []byte("--- ")) {
			docs = append(docs, cur)
			cur = nil
			continue
		}
		cur = append(cur, line...)
	}
	docs = append(docs, cur)
	return slices.DeleteFunc(docs, func(d []byte) bool { return len(bytes.TrimSpace(d)) == 0 })
}

// collect gathers IPPools and NetworkAttachmentDefinitions from one
// object (a List's items included).
func collect(js []byte, pools *[]ipPool, nets networks) error {
	if len(bytes.TrimSpace(js)) == 0 || string(bytes.TrimSpace(js)) == "null" {
		return nil
	}
	var o object
	if err := json.Unmarshal(js, &o); err != nil {
		return fmt.Errorf("%w: %v", importer.ErrInvalidSource, err)
	}
	for _, it := range o.Items {
		if err := collect(it, pools, nets); err != nil {
			return err
		}
	}
	switch o.Kind {
	case "IPPool":
		var s ipPoolSpec
		if err := json.Unmarshal(o.Spec, &s); err != nil {
			return fmt.Errorf("%w: IPPool %s: %v", importer.ErrInvalidSource, o.Metadata.Name, err)
		}
		*pools = append(*pools, ipPool{name: o.Metadata.Name, namespace: o.Metadata.Namespace, spec: s})
	case "NetworkAttachmentDefinition":
		var s struct {
			Config string `json:"config"`
		}
		if err := json.Unmarshal(o.Spec, &s); err != nil {
			return fmt.Errorf("%w: NetworkAttachmentDefinition %s: %v", importer.ErrInvalidSource, o.Metadata.Name, err)
		}
		nets.add(o.Metadata.Name, []byte(s.Config))
	}
	return nil
}

// parseRange reads whereabouts' range: a CIDR, or "first-last/bits".
func parseRange(s string) (netip.Prefix, error) {
	if i := strings.LastIndexByte(s, '-'); i >= 0 && strings.Contains(s, "/") && strings.IndexByte(s, '-') == i {
		if addr, bits, ok := strings.Cut(s[i+1:], "/"); ok {
			s = addr + "/" + bits
		}
	}
	p, err := netip.ParsePrefix(strings.TrimSpace(s))
	if err != nil {
		return netip.Prefix{}, err
	}
	return p.Masked(), nil
}

// addPool adds one IPPool: its pool, the blocks holding its allocations
// and their handles.
func addPool(b *importer.Builder, p ipPool, nets networks, opts Options) error {
	cidr, err := parseRange(p.spec.Range)
	if err != nil {
		return fmt.Errorf("%w: IPPool %s: spec.range %q: %v", importer.ErrInvalidSource, p.name, p.spec.Range, err)
	}
	plain := netpools.WhereaboutsName("", cidr)
	networkName := ""
	switch {
	case p.name == plain:
	case strings.HasSuffix(p.name, "-"+plain):
		networkName = strings.TrimSuffix(p.name, "-"+plain)
	default:
		b.Warn("IPPool %s does not carry whereabouts' name for range %s; imported as pool %s", p.name, cidr, plain)
	}
	pool, err := b.Pool(ipam.Pool{Name: netpools.WhereaboutsName(networkName, cidr), CIDR: cidr, BlockSize: ipam.BlockSizeFor(cidr, opts.BlockSize, opts.BlockSizeV6)})
	if err != nil {
		return err
	}
	network := opts.Network
	if network == "" {
		if network, err = nets.lookup(networkName, cidr); err != nil {
			return err
		}
	}
	if network == "" {
		network = DefaultNetwork
		b.Warn("pool %s: no --network and no NetworkAttachmentDefinition for range %s in the input: handles are named %s.<container ID>.<ifname>, which a CNI DEL under another network name does not find", pool.Name, cidr, DefaultNetwork)
	}
	base := new(big.Int).SetBytes(cidr.Addr().AsSlice())
	blocks := map[netip.Prefix]*ipam.Block{}
	for _, key := range slices.Sorted(maps.Keys(p.spec.Allocations)) {
		a := p.spec.Allocations[key]
		off, ok := new(big.Int).SetString(strings.TrimSpace(key), 10)
		if !ok || off.Sign() < 0 {
			return fmt.Errorf("%w: IPPool %s: allocation key %q is not an offset", importer.ErrInvalidSource, p.name, key)
		}
		sum := new(big.Int).Add(base, off)
		var addr netip.Addr
		if sum.BitLen() <= cidr.Addr().BitLen() {
			addr, _ = netip.AddrFromSlice(sum.FillBytes(make([]byte, cidr.Addr().BitLen()/8)))
		}
		if !addr.IsValid() || !cidr.Contains(addr) {
			return fmt.Errorf("%w: IPPool %s: allocation %s is outside %s", importer.ErrInvalidSource, p.name, key, cidr)
		}
		if a.ID == "" {
			return fmt.Errorf("%w: IPPool %s: allocation %s (%s) has no id", importer.ErrInvalidSource, p.name, key, addr)
		}
		bp, _ := addr.Prefix(pool.BlockSize)
		blk := blocks[bp]
		if blk == nil {
			nb := ipam.NewBlock(pool, bp, "")
			nb.Owners = map[int]string{}
			blk = &nb
			blocks[bp] = blk
		}
		ifname := a.IfName
		if ifname == "" {
			ifname = "eth0" // whereabouts before 0.6 did not record it
		}
		h := ipam.Handle{ID: ipam.HandleID(network, a.ID, ifname), Network: network, ContainerID: a.ID, IfName: ifname}
		h.Namespace, h.Pod, _ = strings.Cut(a.PodRef, "/")
		if h.Pod == "" {
			h.Namespace, h.Pod = "", a.PodRef
		}
		ord, _ := blk.Ordinal(addr)
		blk.Free = slices.DeleteFunc(blk.Free, func(o int) bool { return o == ord })
		blk.Owners[ord] = h.ID
		b.Handle(h, ipam.HandleIP{Addr: addr, Pool: pool.Name, Block: bp})
	}
	for _, bp := range slices.SortedFunc(maps.Keys(blocks), func(x, y netip.Prefix) int { return x.Addr().Compare(y.Addr()) }) {
		b.Block(*blocks[bp])
	}
	return nil
}
