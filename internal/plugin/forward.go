package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/podinfo"
)

// forward hands a verb on the kubernetes datastore to the node's
// ipkeeper-agent when the config names one (ipam.kubernetes.agentSocket):
// the agent keeps a warm client, the node's object and the pools, so an
// ADD costs the plugin's exec, one unix round trip and, in the common
// case, one write — instead of ipkeeper-kube's start-up, a TLS handshake
// and the reads. It reports whether the verb was handled (its result is
// printed to p.Stdout, or its CNI error returned). An agent that cannot
// be reached, or is not ready, is not an error: the verb runs through
// ipkeeper-kube (handOff) as without an agent. A binary that links the
// kubernetes datastore (ipkeeper-kube) or serves it (the agent's, with
// KubeAllocator) never forwards. p carries the verb's parsed config
// (withConfig).
func (p *Plugin) forward(command string, args *skel.CmdArgs) (bool, error) {
	if p.KubeAllocator != nil || datastore.KubernetesLinked() {
		return false, nil
	}
	conf := kubeDatastore(p.parsed.conf)
	if conf == nil || conf.AgentSocket == "" {
		return false, nil
	}
	stdin, err := withNodeName(args.StdinData, conf.NodeName)
	if err != nil {
		return false, nil // the verb itself reports a config it cannot read
	}
	deadline := p.deadline
	if deadline.IsZero() {
		deadline = time.Now().Add(Timeout)
	}
	h := handover{end: p.end}
	if h.end.IsZero() {
		h.end = deadline
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	// The agent gets its share of the call (agentContext); past it, the
	// verb runs through KubeBinary. A verb the agent still completes after
	// that does no harm: ADD and DEL are idempotent by attachment, so the
	// fallback's ADD returns what the agent's allocated, and the agent
	// stops a verb whose caller went away (ServeContext).
	actx, acancel := agentContext(ctx)
	defer acancel()
	c := podinfo.NewAgentClient(conf.AgentSocket)
	if command == "STATUS" {
		if err := c.Ready(actx); err != nil {
			p.Log.Warn("ipkeeper agent not ready; the kubernetes datastore is served by "+KubeBinary, "socket", conf.AgentSocket, "err", err)
			h.agentErr = err
			return true, handOff(conf, args.StdinData, false, h)
		}
	}
	ans, err := c.CNI(actx, podinfo.CNIRequest{Command: command, ContainerID: args.ContainerID, NetNS: args.Netns,
		IfName: args.IfName, Args: args.Args, Path: args.Path, Stdin: stdin})
	switch {
	case errors.Is(err, podinfo.ErrAgentUnreachable), errors.Is(err, podinfo.ErrAgentNotReady):
		p.Log.Warn("ipkeeper agent unreachable; the kubernetes datastore is served by "+KubeBinary, "socket", conf.AgentSocket, "err", err)
		h.agentErr = err
		return true, handOff(conf, args.StdinData, false, h)
	case errors.Is(err, podinfo.ErrWrongNode):
		return true, fmt.Errorf("%w: %w", config.ErrInvalid, err)
	case err != nil:
		return true, err
	case ans.Error != nil:
		return true, types.NewError(ans.Error.Code, ans.Error.Msg, ans.Error.Details)
	}
	_, err = p.Stdout.Write(ans.Stdout)
	return true, err
}

// asCNI maps a verb's error with toCNI; nil stays nil (a nil *types.Error
// returned as an error would not be).
func asCNI(err error, toCNI func(error) *types.Error) error {
	if err == nil {
		return nil
	}
	return toCNI(err)
}

// withNodeName returns the network config with ipam.nodeName set to node:
// the agent resolves the config in its own environment, where $NODENAME
// and the hostname are not the runtime's.
func withNodeName(stdin []byte, node string) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(stdin, &m); err != nil {
		return nil, err
	}
	var ipamConf map[string]json.RawMessage
	if err := json.Unmarshal(m["ipam"], &ipamConf); err != nil {
		return nil, err
	}
	n, err := json.Marshal(node)
	if err != nil {
		return nil, err
	}
	ipamConf["nodeName"] = n
	if m["ipam"], err = json.Marshal(ipamConf); err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

// ServeContext is Serve under ctx: the verb stops (as at its deadline)
// when ctx ends, as an agent's request does when the plugin that sent it
// gave up waiting and ran the verb itself. conf, when not nil, is
// args.StdinData as Validate parsed it: the verb does not parse it again.
func (p *Plugin) ServeContext(ctx context.Context, command string, args *skel.CmdArgs, conf *config.IPAM) ([]byte, *types.Error) {
	q := *p
	q.parent = ctx
	if conf != nil {
		q.parsed = &parsed{conf: conf}
	}
	return q.Serve(command, args)
}

// Serve runs one verb that a plugin process handed over (ipkeeper-agent):
// what the verb prints is returned, or its CNI error. args come from the
// forwarding plugin, which already checked them as skel does.
func (p *Plugin) Serve(command string, args *skel.CmdArgs) ([]byte, *types.Error) {
	q := *p
	var out bytes.Buffer
	q.Stdout = &out
	q.deadline = time.Now().Add(Timeout - watchdogMargin)
	var err error
	toCNI := cniError
	switch command {
	case "ADD":
		err = q.Add(args)
	case "DEL":
		err = q.Del(args)
	case "CHECK":
		err = q.Check(args)
	case "GC":
		err = q.GC(args)
	case "STATUS":
		err, toCNI = q.Status(args), statusError
	default:
		return nil, types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("CNI_COMMAND %q cannot be handed to the agent", command), "")
	}
	if err != nil {
		return nil, toCNI(err)
	}
	return out.Bytes(), nil
}
