package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/ipkeeper/ipkeeper/internal/blockroute"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kube"
)

// DefaultRoutesResync is how often the route mode re-reads the claims.
const DefaultRoutesResync = 30 * time.Second

// RouteOptions are the settings of the agent's route mode.
type RouteOptions struct {
	// Enabled turns the mode on (--routes).
	Enabled bool
	// Resync is the period of the sync from the datastore.
	Resync time.Duration
	// Config is a CNI network config whose datastore holds the claims;
	// "" is the kubernetes datastore (no partition) through the agent's
	// credentials.
	Config string
	// Addresses are node addresses given by flag (NODE=ADDR); each takes
	// the place of the Node's InternalIP of its family.
	Addresses blockroute.Addresses
}

// parseNodeAddresses parses --node-address values.
func parseNodeAddresses(vals []string) (blockroute.Addresses, error) {
	out := blockroute.Addresses{}
	for _, s := range vals {
		node, ip, err := blockroute.ParseAddress(s)
		if err != nil {
			return nil, fmt.Errorf("--node-address: %w", err)
		}
		if slices.ContainsFunc(out[node], func(o netip.Addr) bool { return o.Is4() == ip.Is4() }) {
			return nil, fmt.Errorf("--node-address: node %q is given two addresses of one family", node)
		}
		out[node] = append(out[node], ip)
	}
	return out, nil
}

// NodeAddressWatch keeps every Node's InternalIPs from an informer and
// signals each change of them.
type NodeAddressWatch struct {
	factory informers.SharedInformerFactory
	lister  func() ([]*corev1.Node, error)
	synced  cache.InformerSynced
	given   blockroute.Addresses
	// Changed receives (without blocking) when a Node comes, goes or
	// changes its InternalIPs.
	Changed chan struct{}
}

// NewNodeAddressWatch watches the Nodes through client; given take the
// place of their addresses of the same family.
func NewNodeAddressWatch(client kubernetes.Interface, given blockroute.Addresses) (*NodeAddressWatch, error) {
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(func(obj any) (any, error) {
		if n, ok := obj.(*corev1.Node); ok {
			return &corev1.Node{ObjectMeta: trimMeta(n.ObjectMeta), Status: corev1.NodeStatus{Addresses: n.Status.Addresses}}, nil
		}
		return obj, nil
	}))
	inf := f.Core().V1().Nodes()
	w := &NodeAddressWatch{factory: f, synced: inf.Informer().HasSynced, given: given, Changed: make(chan struct{}, 1)}
	w.lister = func() ([]*corev1.Node, error) { return inf.Lister().List(labels.Everything()) }
	signal := func() {
		select {
		case w.Changed <- struct{}{}:
		default:
		}
	}
	_, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { signal() },
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*corev1.Node)
			c, ok2 := cur.(*corev1.Node)
			if !ok1 || !ok2 || !slices.Equal(blockroute.NodeAddresses(o), blockroute.NodeAddresses(c)) {
				signal()
			}
		},
		DeleteFunc: func(any) { signal() },
	})
	return w, err
}

// Start starts the informer and waits for its first list.
func (w *NodeAddressWatch) Start(ctx context.Context) error {
	w.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), w.synced) {
		return fmt.Errorf("node informer: %w", ctx.Err())
	}
	return nil
}

// Shutdown waits for the informer's goroutines after Start's ctx ended.
func (w *NodeAddressWatch) Shutdown() { w.factory.Shutdown() }

// Addresses returns the Nodes' InternalIPs with the given ones on top.
func (w *NodeAddressWatch) Addresses() blockroute.Addresses {
	out := blockroute.Addresses{}
	nodes, _ := w.lister()
	for _, n := range nodes {
		if ips := blockroute.NodeAddresses(n); len(ips) > 0 {
			out[n.Name] = ips
		}
	}
	return blockroute.Merge(out, w.given)
}

// routeLister returns how the route mode reads claims and node objects: a
// CNI config's datastore opened for each read (a local store is then
// locked only while read), or the kubernetes datastore through rc.
func routeLister(o RouteOptions, rc *rest.Config) (func(ctx context.Context) ([]store.Claim, []store.Node, error), error) {
	list := func(ctx context.Context, st store.Store) ([]store.Claim, []store.Node, error) {
		cs, err := st.ListClaims(ctx, store.ClaimSelector{})
		if err != nil {
			return nil, nil, err
		}
		ns, err := st.ListNodes(ctx, store.NodeSelector{})
		return cs, ns, err
	}
	prefix := ""
	if o.Config != "" {
		conf, err := config.LoadFile(o.Config)
		if err != nil {
			return nil, fmt.Errorf("--routes-config: %w", err)
		}
		if conf.Datastore.Type != config.DatastoreKubernetes {
			ds := conf.Datastore
			return func(ctx context.Context) ([]store.Claim, []store.Node, error) {
				st, err := datastore.Open(ctx, ds, datastore.Options{})
				if err != nil {
					return nil, nil, err
				}
				defer st.Close()
				return list(ctx, st)
			}, nil
		}
		prefix = conf.Datastore.Prefix
	}
	st, err := kube.NewForConfig(rc, prefix)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) ([]store.Claim, []store.Node, error) { return list(ctx, st) }, nil
}

// runRoutes programs the routes to the other nodes' blocks on this node
// until ctx ends: a sync at start, every o.Resync, and whenever a Node's
// addresses change.
func runRoutes(ctx context.Context, o RouteOptions, node string, rc *rest.Config, client kubernetes.Interface, log *slog.Logger) error {
	list, err := routeLister(o, rc)
	if err != nil {
		return err
	}
	w, err := NewNodeAddressWatch(client, o.Addresses)
	if err != nil {
		return err
	}
	nl, err := netlink.NewHandle()
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	log = log.With("component", "routes")
	go func() {
		defer nl.Close()
		defer w.Shutdown()
		if err := w.Start(ctx); err != nil {
			return
		}
		s := &RouteSync{Node: node, List: list, Addresses: w.Addresses, Reconciler: &RouteReconciler{Handle: nl, Log: log}, Log: log}
		log.Info("programming routes to the other nodes' blocks", "protocol", RouteProtocol, "resync", o.Resync)
		s.Run(ctx, o.Resync, w.Changed)
	}()
	return nil
}
