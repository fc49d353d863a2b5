package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/flagenv"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/ipkeeper/ipkeeper/internal/podinfo"
	"github.com/ipkeeper/ipkeeper/internal/store/kube"
)

// DefaultSocket is where the agent listens unless told otherwise, and what
// the shipped config list names as ipam.kubernetes.agentSocket.
const DefaultSocket = "/run/ipkeeper/agent.sock"

// envPrefix prefixes the environment variable of every flag.
const envPrefix = "IPKEEPER_AGENT_"

// Options are the agent's settings.
type Options struct {
	// Kubeconfig is the kubeconfig file; "" uses the in-cluster
	// configuration.
	Kubeconfig string
	// NodeName is the node served.
	NodeName string
	// Socket is the unix socket to listen on.
	Socket string
	// LogLevel is debug, info, warn or error.
	LogLevel string
	// Probe asks a running agent at Socket whether it is ready and exits.
	Probe bool
	// Routes is the route mode's settings.
	Routes RouteOptions
}

// ParseFlags reads the agent's flags from args, each of which may also be
// given as the environment variable IPKEEPER_AGENT_<FLAG> (upper case,
// "-" as "_"); the node name defaults to $NODE_NAME, then
// $KUBERNETES_NODE_NAME, then the hostname.
func ParseFlags(args []string, stderr io.Writer, getenv func(string) string) (Options, error) {
	var o Options
	fs := pflag.NewFlagSet("ipkeeper-agent", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: the in-cluster configuration)")
	fs.StringVar(&o.NodeName, "node-name", "", "the node served (default $NODE_NAME, $KUBERNETES_NODE_NAME, else the hostname)")
	fs.StringVar(&o.Socket, "socket", DefaultSocket, "unix socket to serve the plugin on (mode 0600; its directory is created 0700)")
	fs.StringVar(&o.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.BoolVar(&o.Probe, "probe", false, "ask the agent at --socket whether it is ready, exit 0 if so and 1 if not (for an exec readiness probe)")
	var nodeAddrs []string
	fs.BoolVar(&o.Routes.Enabled, "routes", false, "program kernel routes (protocol 201) to every other node's blocks via that node's address (host-gateway routing)")
	fs.DurationVar(&o.Routes.Resync, "routes-resync", DefaultRoutesResync, "how often --routes re-reads the blocks' claims (Node changes apply at once)")
	fs.StringVar(&o.Routes.Config, "routes-config", "", "CNI network config whose datastore --routes reads (default: the kubernetes datastore with the agent's credentials)")
	fs.StringArrayVar(&nodeAddrs, "node-address", nil, "NODE=ADDR: the address --routes routes NODE's blocks via, instead of its Node's InternalIP of that family (repeatable)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "ipkeeper-agent answers the ipkeeper plugin's pod-aware lookups (pod, namespace, node)\nfrom informer caches over a unix socket; with --routes it also routes the other\nnodes' blocks via their addresses.\n\nFlags:\n%s", fs.FlagUsages())
	}
	if err := flagenv.Set(fs, envPrefix, getenv); err != nil {
		return o, err
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, v := range []string{"NODE_NAME", "KUBERNETES_NODE_NAME"} {
		if o.NodeName == "" {
			o.NodeName = getenv(v)
		}
	}
	if o.NodeName == "" {
		h, err := os.Hostname()
		if err != nil {
			return o, fmt.Errorf("--node-name is unset and so are $NODE_NAME and $KUBERNETES_NODE_NAME; hostname: %w", err)
		}
		o.NodeName = h
	}
	if o.Socket == "" {
		return o, errors.New("--socket is empty")
	}
	if o.Routes.Resync <= 0 {
		return o, fmt.Errorf("--routes-resync %v: want a positive duration", o.Routes.Resync)
	}
	var err error
	if o.Routes.Addresses, err = parseNodeAddresses(nodeAddrs); err != nil {
		return o, err
	}
	return o, nil
}

// Main runs ipkeeper-agent with args and returns its exit code.
func Main(args []string, stderr io.Writer, getenv func(string) string) int {
	o, err := ParseFlags(args, stderr, getenv)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "ipkeeper-agent:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.Probe {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		c := podinfo.NewAgentClient(o.Socket)
		defer c.Close()
		if err := c.Ready(ctx); err != nil {
			fmt.Fprintln(stderr, "ipkeeper-agent:", err)
			return 1
		}
		return 0
	}
	if err := Run(ctx, o, stderr); err != nil {
		fmt.Fprintln(stderr, "ipkeeper-agent:", err)
		return 1
	}
	return 0
}

// Run serves the node's lookups on o.Socket until ctx ends.
func Run(ctx context.Context, o Options, stderr io.Writer) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.LogLevel)); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", o.LogLevel)
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level})).With("node", o.NodeName)
	klog.SetSlogLogger(log.With("component", "client-go"))
	cfg, err := restConfig(o.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.UserAgent = "ipkeeper-agent"
	// Misses read the API server: allow a node's burst of pod starts.
	cfg.QPS, cfg.Burst = 20, 50
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	l, err := Listen(o.Socket)
	if err != nil {
		return err
	}
	a := New(client, o.NodeName, log)
	a.EnableCNI(cfg)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a.Start(ctx)
	defer a.Shutdown()
	if o.Routes.Enabled {
		if err := runRoutes(ctx, o.Routes, o.NodeName, cfg, client, log); err != nil {
			return fmt.Errorf("--routes: %w", err)
		}
	}
	go func() {
		start := time.Now()
		for !a.Ready() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
		log.Info("caches synced", "socket", o.Socket, "duration", time.Since(start))
	}()
	log.Info("serving", "socket", o.Socket, "server", cfg.Host)
	err = a.Serve(ctx, l)
	log.Info("stopped", "socket", o.Socket, "err", err)
	return err
}

// restConfig is the kubeconfig's client configuration, or the in-cluster
// one when path is "" (kube.RESTConfig: files another user could have
// written are refused).
func restConfig(path string) (*rest.Config, error) {
	cfg, err := kube.RESTConfig(path)
	if err != nil && path == "" {
		return nil, fmt.Errorf("%w (or give --kubeconfig)", err)
	}
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	return cfg, nil
}
