package plugin

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/config"
)

// attachmentArgs are the optional per-attachment inputs: Kubernetes pod
// identity from CNI_ARGS and requested addresses from CNI_ARGS (IP=...) or
// runtimeConfig.ips / args.cni.ips.
type attachmentArgs struct {
	Namespace, Pod, PodUID string
	IPs                    []netip.Addr
}

// parseArgs reads the container ID's length (skel checks its form),
// CNI_ARGS ("K=V;K=V", errors wrap errArgs, code 4) and the netconf's
// requested addresses (errors wrap config.ErrInvalid, code 7: a request
// that cannot be read must not end in some other address).
func parseArgs(containerID, cniArgs string, netconf []byte) (attachmentArgs, error) {
	var out attachmentArgs
	if len(containerID) > config.MaxContainerIDLength {
		return out, fmt.Errorf("%w: CNI_CONTAINERID is %d bytes long, more than the limit of %d",
			errArgs, len(containerID), config.MaxContainerIDLength)
	}
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
				a, err := config.ParseRequestedIP(s)
				if err != nil {
					return out, fmt.Errorf("%w: CNI_ARGS IP=%q: %v", errArgs, s, err)
				}
				out.IPs = append(out.IPs, a)
			}
		}
	}
	ips, err := config.RequestedIPs(netconf)
	if err != nil {
		return out, err
	}
	out.IPs = append(out.IPs, ips...)
	return out, nil
}
