package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/netpools"
)

// buildResult converts a handle into a CNI result. This is the one place
// where netip values become net.IP: the CNI types use them.
func buildResult(conf *config.IPAM, sets []netpools.Set, h ipam.Handle) (*current.Result, error) {
	res := &current.Result{CNIVersion: current.ImplementedSpecVersion}
	pools := map[string]ipam.Pool{}
	for _, set := range sets {
		for _, p := range set {
			pools[p.Name] = p
		}
	}
	for _, ip := range h.IPs {
		p, ok := pools[ip.Pool]
		if !ok {
			return nil, fmt.Errorf("handle %s holds %s from pool %q the config does not name", h.ID, ip.Addr, ip.Pool)
		}
		c := &current.IPConfig{Address: ipNet(netip.PrefixFrom(ip.Addr, p.CIDR.Bits()))}
		if p.Gateway.IsValid() {
			c.Gateway = net.IP(p.Gateway.AsSlice())
		}
		res.IPs = append(res.IPs, c)
	}
	for _, r := range conf.Routes {
		rt := &types.Route{Dst: ipNet(r.Dst), MTU: r.MTU, AdvMSS: r.AdvMSS, Table: r.Table, Scope: r.Scope}
		if r.Priority != 0 {
			rt.Priority = r.Priority
		}
		if r.GW.IsValid() {
			rt.GW = net.IP(r.GW.AsSlice())
		}
		res.Routes = append(res.Routes, rt)
	}
	res.DNS = types.DNS{
		Nameservers: conf.DNS.Nameservers,
		Domain:      conf.DNS.Domain,
		Search:      conf.DNS.Search,
		Options:     conf.DNS.Options,
	}
	return res, nil
}

func ipNet(p netip.Prefix) net.IPNet {
	return net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// checkPrevResult compares the handle's addresses with prevResult's.
func checkPrevResult(stdin []byte, h ipam.Handle) error {
	var conf types.PluginConf
	if err := jsonUnmarshal(stdin, &conf); err != nil {
		return err
	}
	if err := version.ParsePrevResult(&conf); err != nil {
		return fmt.Errorf("%w: prevResult: %v", config.ErrInvalid, err)
	}
	if conf.PrevResult == nil {
		return fmt.Errorf("%w: CHECK needs prevResult", config.ErrInvalid)
	}
	prev, err := current.NewResultFromResult(conf.PrevResult)
	if err != nil {
		return fmt.Errorf("%w: prevResult: %v", config.ErrInvalid, err)
	}
	var got, want []netip.Addr
	for _, c := range prev.IPs {
		a, ok := netip.AddrFromSlice(c.Address.IP)
		if ok {
			got = append(got, a.Unmap())
		}
	}
	for _, ip := range h.IPs {
		want = append(want, ip.Addr)
	}
	slices.SortFunc(got, netip.Addr.Compare)
	slices.SortFunc(want, netip.Addr.Compare)
	if !slices.Equal(got, want) {
		return types.NewError(types.ErrInternal,
			fmt.Sprintf("handle %s holds %v but prevResult has %v", h.ID, want, got), "")
	}
	return nil
}

func jsonUnmarshal(b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return types.NewError(types.ErrDecodingFailure, fmt.Sprintf("network config is not valid JSON: %v", err), "")
	}
	return nil
}

func isNotFound(err error) bool { return errors.Is(err, allocator.ErrPoolNotFound) }
