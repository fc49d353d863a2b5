package whereabouts

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/importer"
)

// networks maps a whereabouts pool (network_name and range) to the CNI
// network names of the NetworkAttachmentDefinitions that use it.
type networks map[string][]string

func poolKey(networkName string, cidr netip.Prefix) string { return networkName + " " + cidr.String() }

type wbIPAM struct {
	Type        string `json:"type"`
	Range       string `json:"range"`
	NetworkName string `json:"network_name"`
	IPRanges    []struct {
		Range string `json:"range"`
	} `json:"ipRanges"`
}

// add records the whereabouts ranges of one NetworkAttachmentDefinition's
// CNI config (a single config or a list). Multus names the network after
// the NetworkAttachmentDefinition when the config has no name.
func (n networks) add(nadName string, config []byte) {
	var conf struct {
		Name    string  `json:"name"`
		IPAM    *wbIPAM `json:"ipam"`
		Plugins []struct {
			IPAM *wbIPAM `json:"ipam"`
		} `json:"plugins"`
	}
	if json.Unmarshal(config, &conf) != nil {
		return
	}
	name := conf.Name
	if name == "" {
		name = nadName
	}
	ipams := []*wbIPAM{conf.IPAM}
	for _, p := range conf.Plugins {
		ipams = append(ipams, p.IPAM)
	}
	for _, i := range ipams {
		if i == nil || i.Type != "whereabouts" {
			continue
		}
		ranges := []string{i.Range}
		for _, r := range i.IPRanges {
			ranges = append(ranges, r.Range)
		}
		for _, r := range ranges {
			cidr, err := parseRange(r)
			if err != nil {
				continue
			}
			k := poolKey(i.NetworkName, cidr)
			if !slices.Contains(n[k], name) {
				n[k] = append(n[k], name)
			}
		}
	}
}

// lookup returns the one network name using the pool, "" when no
// NetworkAttachmentDefinition in the input uses it.
func (n networks) lookup(networkName string, cidr netip.Prefix) (string, error) {
	names := n[poolKey(networkName, cidr)]
	switch len(names) {
	case 0:
		return "", nil
	case 1:
		return names[0], nil
	}
	return "", fmt.Errorf("%w: range %s is used by networks %s: pass --network to say which one the pool's pods were attached with",
		importer.ErrInvalidSource, cidr, strings.Join(names, ", "))
}
