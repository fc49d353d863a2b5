// Package plugin implements the ipkeeper CNI IPAM plugin: ADD, DEL, CHECK,
// GC and STATUS over the allocator, with results and errors in the CNI
// spec's shapes for cniVersion 0.3.0 through 1.1.0.
package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/netpools"
	"github.com/ipkeeper/ipkeeper/internal/podinfo"
)

// Versions are the CNI spec versions the plugin speaks.
var Versions = version.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")

// Plugin holds what the verbs share. The zero value is not usable; use New.
type Plugin struct {
	// Log receives diagnostics; never stdout.
	Log *slog.Logger
	// Stdout receives results.
	Stdout io.Writer
	// deadline ends the verbs' context; zero means Timeout from the start
	// of the verb.
	deadline time.Time
	// end is the call's deadline, the watchdog's (Main); zero when no
	// watchdog runs.
	end time.Time
	// agentDown is why the node's agent did not serve this verb, when the
	// plugin process that handed it over found so (handedOver): the
	// agent is not asked again.
	agentDown error
	// parent, when set, is the context the verbs' own derives from: the
	// agent's request, which ends when the plugin that sent it is gone.
	parent context.Context
	// KubeAllocator, when set, serves kubernetes datastores instead of
	// opening one per verb: ipkeeper-agent's long-lived allocator, which
	// keeps its client, the node's object and the pools warm.
	KubeAllocator func(ctx context.Context, ds config.Datastore) (*allocator.Allocator, error)
	// InContainer tells that the verbs run in a container (ipkeeper-agent)
	// rather than on the host: an earlier sandbox's network namespace
	// counts as gone only where the host's /var/run/netns is visible, and
	// never by a /proc/PID path, whose PID is the host's.
	InContainer bool
	// parsed, when set, is the verb's config parsed before the verb ran
	// (Main, ServeContext): the verb does not parse it again.
	parsed *parsed
	// Pods, when set, answers the pod-aware lookups of configs that name
	// an agent socket, in process: ipkeeper-agent's own caches, which
	// the socket would reach with an HTTP round trip to itself.
	Pods PodSource
}

// PodSource answers pod-aware lookups as podinfo.AgentClient does.
type PodSource interface {
	// Lookup reads the pod (none when pod is ""), its namespace and the
	// node, as podinfo.AgentClient.Lookup.
	Lookup(ctx context.Context, namespace, pod, uid, node string) (*podinfo.Info, error)
	// Ready tells that the caches are synced.
	Ready() bool
}

// New returns a plugin logging to stderr at the level named by
// $IPKEEPER_LOG_LEVEL (default warn) and printing results to stdout.
func New() *Plugin {
	var level slog.Level
	if err := level.UnmarshalText([]byte(os.Getenv("IPKEEPER_LOG_LEVEL"))); err != nil {
		level = slog.LevelWarn
	}
	return &Plugin{
		Log:    slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
		Stdout: os.Stdout,
	}
}

// session is one invocation's parsed config and open datastore.
type session struct {
	conf  *config.IPAM
	alloc *allocator.Allocator
	close func()
	// planned are the range sets of a config that defines its pools by
	// ranges, planned (and checked) before the datastore was opened; nil
	// when the config names pools.
	planned []netpools.Set
}

// rangeSets returns the config's range sets and the pools an allocation
// defines: the planned sets, or the named pools read from the datastore.
func (s *session) rangeSets(ctx context.Context) ([]netpools.Set, []ipam.Pool, error) {
	if s.planned != nil {
		return s.planned, netpools.Definitions(s.planned), nil
	}
	return netpools.Resolve(ctx, allocationPools{s.alloc}, s.conf)
}

// allocationPools reads a config's named pools as the allocation does
// (Allocator.PoolForAllocation), once for both.
type allocationPools struct{ *allocator.Allocator }

func (p allocationPools) Pool(ctx context.Context, name string) (ipam.Pool, error) {
	return p.PoolForAllocation(ctx, name)
}

// prepareFunc adjusts a parsed config before the datastore is opened
// (pod-aware lookups, the node's pod CIDRs); nil changes nothing.
type prepareFunc func(context.Context, *config.IPAM) (*config.IPAM, error)

// open takes the verb's parsed config (withConfig), prepares it and opens
// its datastore. Everything
// that can be checked without the datastore (the pools the ranges define
// included) is checked before it is opened, so that bad input never
// creates one. With warm (ADD, DEL), the node's object and the config's
// pools are read with the open's own read (datastore.Open with Options.Warm).
func (p *Plugin) open(ctx context.Context, prepare prepareFunc, warm bool) (*session, error) {
	conf, err := p.parsed.conf, p.parsed.err
	if err != nil {
		return nil, err
	}
	if prepare != nil {
		if conf, err = prepare(ctx, conf); err != nil {
			return nil, err
		}
	}
	var planned []netpools.Set
	if len(conf.Pools) == 0 && !conf.NeedsPodCIDR(4) && !conf.NeedsPodCIDR(6) {
		if planned, err = netpools.Planned(conf); err != nil {
			return nil, err
		}
	}
	if p.KubeAllocator != nil && conf.Datastore.Type == config.DatastoreKubernetes {
		alloc, err := p.KubeAllocator(ctx, conf.Datastore)
		if err != nil {
			return nil, err
		}
		return &session{conf: conf, alloc: alloc, close: func() {}, planned: planned}, nil
	}
	var w datastore.Warm
	if warm {
		w = datastore.Warm{Node: conf.NodeName, Pools: slices.Clone(conf.Pools)}
		for _, d := range netpools.Definitions(planned) {
			w.Pools = append(w.Pools, d.Name)
		}
	}
	var warmed datastore.Warmed
	store, err := datastore.Open(ctx, conf.Datastore, datastore.Options{Plugin: true, Warm: w, Warmed: &warmed})
	if err != nil {
		return nil, err
	}
	alloc := allocator.New(store, p.Log)
	if warmed.OK {
		alloc.Remember(warmed.Node, warmed.Pools, warmed.Claims...)
	}
	return &session{
		conf:    conf,
		alloc:   alloc,
		close:   func() { _ = store.Close() },
		planned: planned,
	}, nil
}

// withSession runs fn with the parsed config and the open datastore, under
// the invocation's timeout, and maps any error to a CNI error with toCNI.
func (p *Plugin) withSession(toCNI func(error) *types.Error, fn func(context.Context, *session) error) error {
	return p.withPreparedSession(toCNI, nil, false, fn)
}

// withPreparedSession is withSession with a prepare step before the
// datastore is opened, warm as open's.
func (p *Plugin) withPreparedSession(toCNI func(error) *types.Error, prepare prepareFunc, warm bool, fn func(context.Context, *session) error) error {
	deadline := p.deadline
	if deadline.IsZero() {
		deadline = time.Now().Add(Timeout)
	}
	parent := p.parent
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithDeadline(parent, deadline)
	defer cancel()
	s, err := p.open(ctx, prepare, warm)
	if err == nil {
		defer s.close()
		err = fn(ctx, s)
	}
	if err != nil {
		return toCNI(err)
	}
	return nil
}

// Add allocates one address per range set for the attachment.
func (p *Plugin) Add(args *skel.CmdArgs) error {
	p = p.withConfig(args.StdinData)
	att, err := parseArgs(args.ContainerID, args.Args, args.StdinData)
	if err != nil {
		return cniError(err)
	}
	// skel checks the netns only after ADD returned, which would leave the
	// allocation behind the error it then prints, and it opens the path
	// blocking, which hangs on a FIFO: check first, without blocking.
	if o := strings.ToUpper(args.NetnsOverride); o != "TRUE" && o != "1" {
		if err := checkNetNS(args.Netns); err != nil {
			return cniError(err)
		}
	}
	if ok, err := p.forward("ADD", args); ok {
		return asCNI(err, cniError)
	}
	var pa podAware
	prepare := p.kubePrepare(att, true, &pa)
	// The result is printed once the session is closed: the node's next
	// plugin process need not wait for it.
	var result types.Result
	err = p.withPreparedSession(cniError, prepare, true, func(ctx context.Context, s *session) error {
		sets, define, err := s.rangeSets(ctx)
		if err != nil {
			return err
		}
		if sets, err = pa.sets(ctx, s.alloc, sets); err != nil {
			return err
		}
		req := allocator.Request{
			Handle: ipam.Handle{
				ID:          ipam.HandleID(s.conf.Network, args.ContainerID, args.IfName),
				Network:     s.conf.Network,
				ContainerID: args.ContainerID,
				IfName:      args.IfName,
				Node:        s.conf.NodeName,
				NetNS:       args.Netns,
				Namespace:   att.Namespace,
				Pod:         att.Pod,
				PodUID:      att.PodUID,
			},
			Labels: pa.labels(s.conf.NodeName),
			Want:   pa.want(att.IPs),
			Define: define,
		}
		for _, set := range sets {
			req.Sets = append(req.Sets, set.Names())
		}
		sticky, isSticky, err := s.stickyIdentity(ctx, pa, req)
		if err != nil {
			return err
		}
		var h ipam.Handle
		if isSticky {
			req.Handle.Sticky = sticky.String()
			h, err = s.alloc.AllocateSticky(ctx, req)
		} else {
			h, err = s.alloc.Allocate(ctx, req)
		}
		if errors.Is(err, allocator.ErrExhausted) {
			// A full pool: an earlier sandbox of this pod may hand its
			// addresses over (see takeover.go).
			h, err = p.takeOver(ctx, s.alloc, req, err)
		}
		if errors.Is(err, allocator.ErrNoPool) {
			return fmt.Errorf("node %q: %w", s.conf.NodeName, err)
		}
		if err != nil {
			return err
		}
		p.Log.Info("allocated", "handle", h.ID, "node", h.Node, "ips", fmt.Sprint(h.IPs), "sticky", h.Sticky)
		res, err := buildResult(s.conf, sets, h)
		if err != nil {
			return err
		}
		if result, err = res.GetAsVersion(s.conf.CNIVersion); err != nil {
			return types.NewError(types.ErrIncompatibleCNIVersion, err.Error(), "")
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := result.PrintTo(p.Stdout); err != nil {
		return cniError(err)
	}
	return nil
}

// Del releases everything of the attachment's handle; nothing to release
// is success. CNI_NETNS is not looked at: an IPAM plugin never enters the
// namespace, the handle is named by network, container ID and interface,
// and the CNI spec asks DEL to succeed as far as it can. Refusing a DEL
// for its netns (gone, a FIFO, the plugin's own) would leak the address
// for as long as the runtime keeps sending it; Main turns off skel's
// after-the-fact check for DEL, which failed the call after the release
// (and hung on a FIFO).
func (p *Plugin) Del(args *skel.CmdArgs) error {
	p = p.withConfig(args.StdinData)
	if ok, err := p.forward("DEL", args); ok {
		return asCNI(err, cniError)
	}
	return p.withPreparedSession(cniError, nil, true, func(ctx context.Context, s *session) error {
		id := ipam.HandleID(s.conf.Network, args.ContainerID, args.IfName)
		// A sticky handle's addresses stay reserved for its identity.
		freed, parked, err := s.alloc.ReleaseOrPark(ctx, s.conf.NodeName, id)
		if err == nil && parked {
			p.Log.Info("parked for its sticky identity", "handle", id, "ips", fmt.Sprint(freed))
		} else if err == nil {
			p.Log.Info("released", "handle", id, "ips", fmt.Sprint(freed))
		}
		return err
	})
}

// Check verifies that the attachment's allocation exists and matches the
// addresses of prevResult.
func (p *Plugin) Check(args *skel.CmdArgs) error {
	p = p.withConfig(args.StdinData)
	if ok, err := p.forward("CHECK", args); ok {
		return asCNI(err, cniError)
	}
	return p.withSession(cniError, func(ctx context.Context, s *session) error {
		id := ipam.HandleID(s.conf.Network, args.ContainerID, args.IfName)
		h, ok, err := s.alloc.Handle(ctx, s.conf.NodeName, id)
		if err != nil {
			return err
		}
		if !ok {
			return types.NewError(types.ErrUnknownContainer, fmt.Sprintf("no allocation for handle %q", id), "")
		}
		return checkPrevResult(args.StdinData, h)
	})
}

// GC releases every allocation of this network on this node whose
// attachment is not listed in cni.dev/valid-attachments, then adopts the
// blocks an ADD killed before its node's write left claimed but unused
// (allocator.AdoptClaims), so that `ipkeeperctl check` finds nothing of
// such an ADD. It reads this node's object and the objects its handles
// borrowed from, never the whole cluster's.
// A GC without a well-formed list (neither cni.dev/valid-attachments nor
// the tagged CNI 1.1.0 spec's cni.dev/attachments, null, or an entry
// without containerID or ifname) fails with code 7 and releases nothing.
func (p *Plugin) GC(args *skel.CmdArgs) error {
	p = p.withConfig(args.StdinData)
	attachments, err := config.GCAttachments(args.StdinData)
	if err != nil {
		return cniError(err)
	}
	if ok, err := p.forward("GC", args); ok {
		return asCNI(err, cniError)
	}
	return p.withSession(cniError, func(ctx context.Context, s *session) error {
		valid := make(map[string]bool, len(attachments))
		for _, v := range attachments {
			valid[ipam.HandleID(s.conf.Network, v.ContainerID, v.IfName)] = true
		}
		node := s.conf.NodeName
		hs, err := s.alloc.NodeHandles(ctx, node)
		if err != nil {
			return err
		}
		for _, h := range hs {
			if h.Network != s.conf.Network || valid[h.ID] || h.IsParked() {
				continue
			}
			// As DEL: a sticky handle is parked, not released.
			freed, parked, err := s.alloc.ReleaseOrPark(ctx, node, h.ID)
			if err != nil {
				return err
			}
			p.Log.Info("gc released", "handle", h.ID, "node", node, "ips", fmt.Sprint(freed), "parked", parked)
		}
		adopted, err := s.alloc.AdoptClaims(ctx, node)
		if len(adopted) > 0 {
			p.Log.Info("gc adopted claimed blocks", "node", node, "blocks", fmt.Sprint(adopted))
		}
		return err
	})
}

// Status fails when the datastore or the node's agent cannot be used, or
// the config cannot: what keeps every ADD from working. A full pool does
// not fail it: the kubelet treats a failing STATUS as the node's network
// not being ready, stops syncing every pod that needs the network —
// tearing down a dead sandbox included, whose DEL would free its address
// — and marks the Node not Ready, so the node's pods may be evicted. An
// ADD on a full pool fails on its own with code 100, naming the pool,
// and the controller's metrics and alerts see exhaustion coming.
func (p *Plugin) Status(args *skel.CmdArgs) error {
	p = p.withConfig(args.StdinData)
	if ok, err := p.forward("STATUS", args); ok {
		return asCNI(err, statusError)
	}
	var pa podAware
	return p.withPreparedSession(statusError, p.kubePrepare(attachmentArgs{}, false, &pa), false, status)
}

// statusError maps STATUS failures that mean "cannot serve ADD now" to the
// CNI 1.1 code 50; config errors keep their codes.
func statusError(err error) *types.Error {
	e := cniError(err)
	if e.Code == types.ErrTryAgainLater || e.Code == CodePoolExhausted || e.Code == CodeNoPool || e.Code == types.ErrInternal {
		return types.NewError(CodeNotAvailable, e.Msg, e.Details)
	}
	return e
}

// status checks that the datastore answers and that every range set of
// the config names pools it can read (a pool the config defines but nobody
// created yet is created on the first ADD).
func status(ctx context.Context, s *session) error {
	sets, _, err := s.rangeSets(ctx)
	if err != nil {
		return err
	}
	for _, set := range sets {
		for _, want := range set {
			_, err := s.alloc.Pool(ctx, want.Name)
			if err != nil && !(isNotFound(err) && len(s.conf.Pools) == 0) {
				return err
			}
		}
	}
	return nil
}
