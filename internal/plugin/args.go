package plugin

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
)

// attachmentArgs are the optional per-attachment inputs: Kubernetes pod
// identity from CNI_ARGS and requested addresses from CNI_ARGS (IP=...) or
// runtimeConfig.ips / args.cni.ips.
type attachmentArgs struct {
	Namespace, Pod, PodUID string
	IPs                    []netip.Addr
}

// parseArgs reads CNI_ARGS ("K=V;K=V") and the netconf's runtime config.
func parseArgs(cniArgs string, netconf []byte) (attachmentArgs, error) {
	var out attachmentArgs
	for kvs := range strings.SplitSeq(cniArgs, ";") {
		if kvs == "" {
			continue
		}
		k, v, ok := strings.Cut(kvs, "=")
		if !ok {
			return out, fmt.Errorf("%w: CNI_ARGS entry %q is not KEY=VALUE", errArgs, kvs)
		}
		switch k {
		case "K8S_POD_NAMESPACE":
			out.Namespace = v
		case "K8S_POD_NAME":
			out.Pod = v
		case "K8S_POD_UID":
			out.PodUID = v
		case "IP":
			for s := range strings.SplitSeq(v, ",") {
				a, err := parseIP(s)
				if err != nil {
					return out, fmt.Errorf("%w: CNI_ARGS IP=%q: %v", errArgs, s, err)
				}
				out.IPs = append(out.IPs, a)
			}
		}
	}
	var rc struct {
		RuntimeConfig struct {
			IPs []string `json:"ips"`
		} `json:"runtimeConfig"`
		Args struct {
			CNI struct {
				IPs []string `json:"ips"`
			} `json:"cni"`
		} `json:"args"`
	}
	if err := json.Unmarshal(netconf, &rc); err != nil {
		return out, nil // the config parser reports malformed JSON
	}
	for _, s := range append(rc.RuntimeConfig.IPs, rc.Args.CNI.IPs...) {
		a, err := parseIP(s)
		if err != nil {
			return out, fmt.Errorf("%w: runtimeConfig ips %q: %v", errArgs, s, err)
		}
		out.IPs = append(out.IPs, a)
	}
	return out, nil
}

// parseIP accepts "10.0.0.5" or "10.0.0.5/24" (the prefix is ignored).
func parseIP(s string) (netip.Addr, error) {
	s = strings.TrimSpace(s)
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Addr(), nil
	}
	return netip.ParseAddr(s)
}
