package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/plugin"
	"github.com/ipkeeper/ipkeeper/internal/podinfo"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kube"
)

// cniQPS and cniBurst rate-limit each partition's client of the agent's
// verbs.
const (
	cniQPS   = 50
	cniBurst = 100
)

// maxCNIRequest bounds a forwarded verb's request: the network config is
// at most config.MaxConfigBytes, plus the CNI_* values.
const maxCNIRequest = config.MaxConfigBytes + 64<<10

// EnableCNI makes the agent serve the plugin's verbs on kubernetes
// datastores (podinfo.AgentCNIPath) with the agent's own credentials (rc:
// the node's ServiceAccount, as the kubeconfig the installer writes for
// the plugin). One allocator per partition lives as long as the agent:
// its client's connection and the node's object as last written stay
// warm, and its pools and reservations are the partition's watch of them
// (poolView), so that an ADD in a block the node holds is one write and
// no read, and a reservation applies from the first ADD after its watch
// event. The verbs run as in the plugin, in a container
// (plugin.Plugin.InContainer: earlier sandboxes' namespaces are only
// judged where the host's /var/run/netns is mounted); their pod-aware
// lookups read the agent's caches directly, not through its socket.
func (a *Agent) EnableCNI(rc *rest.Config) {
	cni := rest.CopyConfig(rc)
	// The node's pod starts through it, one write each: as fast as the
	// kubelet's own client may go (its --kube-api-qps and burst defaults).
	cni.QPS, cni.Burst = cniQPS, cniBurst
	k := &kubeAllocators{rc: cni, log: a.log, byPrefix: map[string]*allocator.Allocator{}, stop: make(chan struct{})}
	a.kubeAllocs = k
	a.cni = &plugin.Plugin{Log: a.log.With("component", "cni"), KubeAllocator: k.get, InContainer: true, Pods: a}
}

// kubeAllocators holds one allocator per partition of the kubernetes
// datastore.
type kubeAllocators struct {
	rc       *rest.Config
	log      *slog.Logger
	mu       sync.Mutex
	byPrefix map[string]*allocator.Allocator
	views    []*poolView
	stop     chan struct{}
	stopped  bool
}

// get returns the partition's allocator, its pools and reservations
// watched from its first verb on; the config's kubeconfig path is the
// host's and is not read here.
func (k *kubeAllocators) get(_ context.Context, ds config.Datastore) (*allocator.Allocator, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if a, ok := k.byPrefix[ds.Prefix]; ok {
		return a, nil
	}
	st, err := kube.NewForConfig(k.rc, ds.Prefix)
	if err != nil {
		return nil, err
	}
	dc, err := dynamic.NewForConfig(k.rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	v, err := newPoolView(dc, st, k.log.With("partition", ds.Prefix))
	if err != nil {
		return nil, err
	}
	if !k.stopped {
		v.start()
		k.views = append(k.views, v)
	}
	a := allocator.New(viewStore{Store: st, view: v}, k.log)
	// Every allocation asks the view (memory): no pool is kept beside it.
	a.PoolCacheTTL = 0
	k.byPrefix[ds.Prefix] = a
	return a, nil
}

// shutdown stops the partitions' watches.
func (k *kubeAllocators) shutdown() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stopped = true
	for _, v := range k.views {
		v.shutdown()
	}
}

// viewStore is a partition's store whose pool reads for allocations
// (GetPoolCached) come from the agent's watch of its pools and
// reservations; a pool the view cannot answer for (not listed yet, its
// watch failed, not in it) is read from the API up to date. Every other
// read, GetPool included, goes to the API: an allocation that claimed a
// block reads its pool up to date (pool removal's guard), and so does
// every other caller of GetPool.
type viewStore struct {
	*kube.Store
	view *poolView
}

// PoolsInMemory reports whether the view answers for the pools (the
// allocator then reads them one by one from it, with no list first).
func (s viewStore) PoolsInMemory() bool { return s.view.answers() }

// GetPoolCached answers from the view, else reads the API.
func (s viewStore) GetPoolCached(ctx context.Context, name string) (store.Pool, error) {
	if p, err := s.view.pool(name); err == nil {
		return p, nil
	}
	return s.Store.GetPool(ctx, name)
}

// serveCNI runs one forwarded verb: the answer is 200 with what the verb
// printed or its CNI error. Before the verb touches the API server the
// request is checked as the plugin checks its input (plugin.Validate: a
// refusal is the CNI error the plugin would print), a config of another
// node is refused (WrongNode), as lookups are, and so is a config the
// agent does not serve (code 7, see served).
func (a *Agent) serveCNI(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if a.cni == nil {
		writeJSON(w, http.StatusNotFound, podinfo.AgentError{Reason: podinfo.ReasonBadRequest, Message: "this agent does not serve CNI verbs"})
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxCNIRequest+1))
	var req podinfo.CNIRequest
	switch {
	case err != nil:
		writeJSON(w, http.StatusBadRequest, podinfo.AgentError{Reason: podinfo.ReasonBadRequest, Message: "reading the request: " + err.Error()})
		return
	case len(body) > maxCNIRequest:
		writeJSON(w, http.StatusBadRequest, podinfo.AgentError{Reason: podinfo.ReasonBadRequest, Message: fmt.Sprintf("request larger than %d bytes", maxCNIRequest)})
		return
	case json.Unmarshal(body, &req) != nil:
		writeJSON(w, http.StatusBadRequest, podinfo.AgentError{Reason: podinfo.ReasonBadRequest, Message: "the request is not a CNI request"})
		return
	}
	args := &skel.CmdArgs{ContainerID: req.ContainerID, Netns: req.NetNS, IfName: req.IfName,
		Args: req.Args, Path: req.Path, StdinData: req.Stdin}
	conf, verr := plugin.Validate(req.Command, args)
	if verr != nil {
		a.refuseCNI(w, &req, verr)
		return
	}
	if conf.NodeName != a.node {
		ae, status := podinfo.AgentErrorOf(fmt.Errorf("%w: the agent serves node %q, the config names %q", podinfo.ErrWrongNode, a.node, conf.NodeName))
		a.log.Warn("cni refused", "command", req.Command, "container", req.ContainerID, "err", ae.Message)
		writeJSON(w, status, ae)
		return
	}
	if err := served(conf); err != nil {
		a.refuseCNI(w, &req, plugin.VerbError(req.Command, err))
		return
	}
	out, cerr := a.cni.ServeContext(r.Context(), req.Command, args, conf)
	ans := podinfo.CNIAnswer{Stdout: out}
	if cerr != nil {
		ans = podinfo.CNIAnswer{Error: &podinfo.CNIError{Code: cerr.Code, Msg: cerr.Msg, Details: cerr.Details}}
	}
	a.log.Debug("cni", "command", req.Command, "container", req.ContainerID, "ifname", req.IfName, "failed", cerr != nil, "duration", time.Since(start))
	writeJSON(w, http.StatusOK, ans)
}

// refuseCNI answers a verb the agent does not run with the CNI error e.
func (a *Agent) refuseCNI(w http.ResponseWriter, req *podinfo.CNIRequest, e *types.Error) {
	a.log.Warn("cni refused", "command", req.Command, "container", req.ContainerID, "ifname", req.IfName, "code", e.Code, "err", e.Error())
	writeJSON(w, http.StatusOK, podinfo.CNIAnswer{Error: &podinfo.CNIError{Code: e.Code, Msg: e.Msg, Details: e.Details}})
}

// served checks that the agent runs verbs for conf: a config the plugin
// hands over, which names an agent socket (its pod-aware lookups are then
// the agent's own, never a kubeconfig the request names), on the
// kubernetes datastore, which the agent reaches with its own credentials
// in its own cluster (the config's kubeconfig, a path on the host, is not
// read; any partition is served). A local store at a path the request
// names, or an etcd cluster, is refused before it is opened. Errors wrap
// config.ErrInvalid.
func served(conf *config.IPAM) error {
	if conf.Datastore.Type != config.DatastoreKubernetes {
		return fmt.Errorf("%w: the config's datastore is of type %q: ipkeeper-agent serves only the kubernetes datastore "+
			"(the plugin runs the %s datastore itself and never hands it to the agent)", config.ErrInvalid, conf.Datastore.Type, conf.Datastore.Type)
	}
	if conf.AgentSocket == "" {
		return fmt.Errorf("%w: the config names no agent socket (ipam.kubernetes.agentSocket): ipkeeper-agent serves only "+
			"the verbs a plugin hands to it, whose config names the socket", config.ErrInvalid)
	}
	return nil
}
