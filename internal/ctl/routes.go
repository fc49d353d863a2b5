package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/blockroute"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kube"
)

// routesFlags are the flags of routes.
type routesFlags struct {
	kube        kubeFlags
	addresses   []string
	skipUnknown bool
}

func (c *cli) routesCmd() *cobra.Command {
	var f routesFlags
	cmd := &cobra.Command{
		Use:   "routes",
		Short: "Print the routes to every node's blocks via the node's address (-o table|json|yaml|bird|frr)",
		Long: `routes prints, per node, the blocks it holds and the addresses it borrowed
in other nodes' blocks (as /32 or /128), each via the node's address: the
routes that make pods reachable across nodes on a flat network.

A node's address is its Node object's InternalIP of the route's family (on
the kubernetes datastore, or with --kubeconfig), or the one --node-address
NODE=ADDR gives (repeat it for more nodes and for the other family; it
takes the place of the Node's address of that family). A node with
something to route but no address of that family is an error naming it;
with --skip-unknown its routes are left out and named on stderr instead.
Blocks affine to no node are not routed.

-o bird prints the lines of a BIRD static protocol (IPv4, then IPv6: one
protocol per channel), -o frr FRR's static routes.`,
		Args: cobra.NoArgs,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			switch c.output {
			case "table", "json", "yaml", "bird", "frr":
				return nil
			}
			return fmt.Errorf("-o %q: want table, json, yaml, bird or frr", c.output)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.routes(cmd.Context(), &f)
		},
	}
	f.kube.register(cmd.Flags())
	cmd.Flags().StringArrayVar(&f.addresses, "node-address", nil, "NODE=ADDR: the address routes to NODE's blocks go via (repeatable; one per node and family)")
	cmd.Flags().BoolVar(&f.skipUnknown, "skip-unknown", false, "leave out the routes of nodes whose address is unknown (named on stderr) instead of failing")
	return cmd
}

func (c *cli) routes(ctx context.Context, f *routesFlags) error {
	given := blockroute.Addresses{}
	for _, s := range f.addresses {
		node, ip, err := blockroute.ParseAddress(s)
		if err != nil {
			return fmt.Errorf("--node-address: %w", err)
		}
		for _, o := range given[node] {
			if o.Is4() == ip.Is4() && o != ip {
				return fmt.Errorf("--node-address: node %q is given two IPv%d addresses, %s and %s", node, family(ip), o, ip)
			}
		}
		given[node] = append(given[node], ip)
	}
	ds, err := c.datastore()
	if err != nil {
		return err
	}
	var claims []store.Claim
	var nodes []store.Node
	err = c.withStore(ctx, func(a *allocator.Allocator) error {
		st := a.Store()
		var err error
		if claims, err = st.ListClaims(ctx, store.ClaimSelector{}); err != nil {
			return fmt.Errorf("list claims: %w", err)
		}
		if nodes, err = st.ListNodes(ctx, store.NodeSelector{}); err != nil {
			return fmt.Errorf("list node objects: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	addrs := blockroute.Addresses{}
	if kc, ok := nodeKubeconfig(f.kube.kubeconfig, ds); ok {
		if addrs, err = clusterAddresses(ctx, kc); err != nil {
			return err
		}
	}
	routes, err := blockroute.Compute(claims, nodes, blockroute.Merge(addrs, given))
	var ue *blockroute.UnknownError
	if errors.As(err, &ue) {
		if !f.skipUnknown {
			return fmt.Errorf("%w (give --node-address NODE=ADDR, or --skip-unknown to leave them out)", err)
		}
		log := slog.New(slog.NewTextHandler(c.env.Stderr, nil))
		for _, u := range ue.Unknown {
			log.Warn("routes left out: node address unknown", "node", u.Node, "family", fmt.Sprintf("IPv%d", u.Family), "destinations", len(u.Dsts))
		}
	} else if err != nil {
		return err
	}
	v := routesViewOf(routes)
	switch c.output {
	case "bird":
		return v.bird(c.env.Stdout)
	case "frr":
		return v.frr(c.env.Stdout)
	}
	return c.print(v)
}

// nodeKubeconfig says which kubeconfig's Nodes give the node addresses:
// --kubeconfig, else the kubernetes datastore's; none on another
// datastore without --kubeconfig.
func nodeKubeconfig(flag string, ds config.Datastore) (string, bool) {
	if flag != "" {
		return flag, true
	}
	if ds.Type == config.DatastoreKubernetes {
		return ds.Kubeconfig, true
	}
	return "", false
}

// clusterAddresses lists the Nodes (paged) and returns their InternalIPs.
func clusterAddresses(ctx context.Context, kubeconfig string) (blockroute.Addresses, error) {
	cfg, err := kube.RESTConfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig for the Nodes' addresses: %w", err)
	}
	cfg.UserAgent = "ipkeeperctl"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig for the Nodes' addresses: %w", err)
	}
	out := blockroute.Addresses{}
	for cont := ""; ; {
		l, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: listPageSize, Continue: cont})
		if err != nil {
			return nil, fmt.Errorf("list nodes: %w", err)
		}
		for i := range l.Items {
			if ips := blockroute.NodeAddresses(&l.Items[i]); len(ips) > 0 {
				out[l.Items[i].Name] = ips
			}
		}
		if cont = l.Continue; cont == "" {
			return out, nil
		}
	}
}

func family(ip netip.Addr) int {
	if ip.Is4() {
		return 4
	}
	return 6
}

// routesView is routes' result: the nodes in name order, each with its
// addresses and routes.
type routesView struct {
	Nodes []nodeRoutes `json:"nodes"`
}

type nodeRoutes struct {
	Node      string       `json:"node"`
	Addresses []string     `json:"addresses"`
	Routes    []routeEntry `json:"routes"`
}

type routeEntry struct {
	Destination string `json:"destination"`
	Via         string `json:"via"`
	Pool        string `json:"pool"`
	// Kind is "block" or "borrowed".
	Kind string `json:"kind"`
}

func routesViewOf(routes []blockroute.Route) routesView {
	v := routesView{Nodes: []nodeRoutes{}}
	for _, r := range routes {
		if n := len(v.Nodes); n == 0 || v.Nodes[n-1].Node != r.Node {
			v.Nodes = append(v.Nodes, nodeRoutes{Node: r.Node, Addresses: []string{}})
		}
		n := &v.Nodes[len(v.Nodes)-1]
		if via := r.Via.String(); !contains(n.Addresses, via) {
			n.Addresses = append(n.Addresses, via)
		}
		n.Routes = append(n.Routes, routeEntry{Destination: r.Dst.String(), Via: r.Via.String(), Pool: r.Pool, Kind: r.Kind})
	}
	return v
}

func contains(ss []string, s string) bool {
	for _, o := range ss {
		if o == s {
			return true
		}
	}
	return false
}

func (v routesView) table(w io.Writer) {
	row(w, "NODE", "DESTINATION", "VIA", "POOL", "KIND")
	for _, n := range v.Nodes {
		for _, r := range n.Routes {
			row(w, n.Node, r.Destination, r.Via, r.Pool, r.Kind)
		}
	}
}

// each calls f with the routes of one family, in node order.
func (v routesView) each(v4 bool, f func(n nodeRoutes, r routeEntry)) {
	for _, n := range v.Nodes {
		for _, r := range n.Routes {
			if p := netip.MustParsePrefix(r.Destination); p.Addr().Is4() == v4 {
				f(n, r)
			}
		}
	}
}

// bird prints the route lines of BIRD static protocols: the IPv4 ones,
// then the IPv6 ones (a static protocol has one channel).
func (v routesView) bird(w io.Writer) error {
	ew := &errWriter{w: w}
	for _, fam := range []struct {
		v4   bool
		name string
	}{{true, "ipv4"}, {false, "ipv6"}} {
		ew.printf("# %s\n", fam.name)
		v.each(fam.v4, func(n nodeRoutes, r routeEntry) {
			ew.printf("route %s via %s; # %s %s, pool %s\n", r.Destination, r.Via, n.Node, r.Kind, r.Pool)
		})
	}
	return ew.err
}

// frr prints FRR's static routes (ip route, ipv6 route), one per line.
func (v routesView) frr(w io.Writer) error {
	ew := &errWriter{w: w}
	for _, fam := range []struct {
		v4   bool
		verb string
	}{{true, "ip"}, {false, "ipv6"}} {
		v.each(fam.v4, func(n nodeRoutes, r routeEntry) {
			ew.printf("%s route %s %s\n", fam.verb, r.Destination, r.Via)
		})
	}
	return ew.err
}

// errWriter keeps the first write error.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}
