package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	_ "github.com/ipkeeper/ipkeeper/internal/datastore/kubeopen" // the kubernetes datastore
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kube"
	"github.com/ipkeeper/ipkeeper/internal/webui"
)

// LeaseName is the name of the leader-election Lease (the shipped RBAC
// lets the controller update only this one).
const LeaseName = "ipkeeper-controller"

// Options are ipkeeper-controller's flags.
type Options struct {
	Kubeconfig     string
	ConfigFile     string
	LeakGrace      time.Duration
	StickyTTL      time.Duration
	Resync         time.Duration
	MetricsAddr    string
	LeaderElect    bool
	LeaseNamespace string
	LeaseDuration  time.Duration
	RenewDeadline  time.Duration
	RetryPeriod    time.Duration
	LogLevel       string
	// MapAddr is where the address map is served ("" for nowhere);
	// beyond loopback it needs MapToken or MapTokenReview.
	MapAddr        string
	MapToken       string
	MapTokenReview bool
	MapAllow       []string
	// Profiling serves Go's profiles (net/http/pprof) under /debug/pprof/
	// on MetricsAddr.
	Profiling bool
	// DatastoreKubeconfig is the kubeconfig of a kubernetes datastore in
	// another cluster ("": the controller's own credentials, Kubeconfig's
	// or in-cluster).
	DatastoreKubeconfig string
}

func (o *Options) register(fs *pflag.FlagSet, getenv func(string) string) {
	ns := getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "kube-system"
	}
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: the in-cluster configuration)")
	fs.StringVar(&o.ConfigFile, "config", "", "CNI network config (.conf or .conflist) whose ipkeeper datastore to use (default: IPKEEPER_DATASTORE, IPKEEPER_LOCAL_PATH, IPKEEPER_ETCD_*, IPKEEPER_DATASTORE_KUBECONFIG/PREFIX from the environment); a kubernetes datastore is opened with the controller's own credentials (--kubeconfig's, or in-cluster), not with the kubeconfig the config names, which is the plugin's on the node")
	fs.StringVar(&o.DatastoreKubeconfig, "datastore-kubeconfig", "", "kubeconfig of a kubernetes datastore in another cluster (default: IPKEEPER_DATASTORE_KUBECONFIG without --config, else --kubeconfig's, else in-cluster)")
	fs.DurationVar(&o.LeakGrace, "leak-grace", time.Minute, "how long an allocation must be seen leaked (and a node gone) before it is released")
	fs.DurationVar(&o.Resync, "resync", time.Minute, "period of full reconcile passes")
	fs.DurationVar(&o.StickyTTL, "sticky-ttl", DefaultStickyTTL, "how long a sticky address stays reserved for a StatefulSet pod or virtual machine without a pod, when its StatefulSet or VirtualMachine does not end it first")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", ":9273", "address serving /metrics, /healthz and /readyz (empty: none)")
	fs.BoolVar(&o.Profiling, "profiling", false, "serve Go's heap, CPU and goroutine profiles under /debug/pprof/ on --metrics-addr")
	fs.BoolVar(&o.LeaderElect, "leader-elect", true, "reconcile only while holding the Lease "+LeaseName)
	fs.StringVar(&o.LeaseNamespace, "lease-namespace", ns, "namespace of the leader-election Lease (the default is $POD_NAMESPACE when set)")
	fs.DurationVar(&o.LeaseDuration, "lease-duration", 15*time.Second, "leader election: how long a lease is valid without renewal")
	fs.DurationVar(&o.RenewDeadline, "renew-deadline", 10*time.Second, "leader election: how long the leader retries renewing before it steps down")
	fs.DurationVar(&o.RetryPeriod, "retry-period", 2*time.Second, "leader election: wait between attempts")
	fs.StringVar(&o.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&o.MapAddr, "map-addr", DefaultMapAddr, "address serving the address map, a read-only web page of the pools, blocks and leak candidates (empty: none); beyond loopback callers need a bearer token")
	fs.StringVar(&o.MapToken, "map-token", "", "bearer token the address map accepts (default $"+webui.TokenEnv+")")
	fs.BoolVar(&o.MapTokenReview, "map-tokenreview", false, "the address map also accepts bearer tokens the Kubernetes API authenticates (TokenReview), e.g. a ServiceAccount's")
	fs.StringSliceVar(&o.MapAllow, "map-allow", nil, "with --map-tokenreview (required with it): the users and groups whose tokens are accepted")
}

// Main runs ipkeeper-controller with args (without the program name) until
// SIGINT or SIGTERM, logging JSON to stderr; it returns the exit status.
func Main(args []string, stderr io.Writer, getenv func(string) string) int {
	fs := pflag.NewFlagSet("ipkeeper-controller", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	var o Options
	o.register(fs, getenv)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "ipkeeper-controller reclaims leaked addresses: allocations of pods that are gone or finished,\nof deleted nodes and of older sandboxes, after --leak-grace, watching the Kubernetes API.\nIt serves the address map, a read-only web page of the pools, blocks and leak candidates, on\n--map-addr (loopback unless told otherwise).\n\nFlags:\n%s", fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.Changed("datastore-kubeconfig") && o.DatastoreKubeconfig == "" {
		fmt.Fprintln(stderr, `ipkeeper-controller: --datastore-kubeconfig "": want a kubeconfig file`)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ipkeeper-controller: unexpected arguments %q\n", fs.Args())
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := Run(ctx, o, stderr, getenv); err != nil {
		fmt.Fprintln(stderr, "ipkeeper-controller:", err)
		return 1
	}
	return 0
}

// Run runs the controller with options o until ctx ends: it checks the
// options, opens the Kubernetes client, builds the controller, starts the
// address map and the metrics server, waits for the informers and then
// reconciles (while leading, with leader election).
func Run(ctx context.Context, o Options, stderr io.Writer, getenv func(string) string) error {
	log, err := o.logger(stderr)
	if err != nil {
		return err
	}
	if err := o.check(); err != nil {
		return err
	}
	ds, err := datastoreOf(o.ConfigFile, getenv)
	if err != nil {
		return err
	}
	if ds, err = o.datastoreCredentials(ds, log); err != nil {
		return err
	}
	m := NewMetrics()
	client, err := apiClient(o.Kubeconfig, m)
	if err != nil {
		return err
	}
	c, err := o.controller(ds, client, m, log)
	if err != nil {
		return err
	}
	defer c.Shutdown()
	if o.MapAddr != "" {
		stopMap, err := o.startMap(ctx, c, ds, client, log, getenv)
		if err != nil {
			return err
		}
		defer stopMap()
	}

	id := identity()
	var health *leaderelection.HealthzAdaptor
	if o.LeaderElect {
		health = leaderelection.NewLeaderHealthzAdaptor(o.RenewDeadline)
	}
	if o.MetricsAddr != "" {
		srv, err := serve(o.MetricsAddr, m, c, health, o.Profiling)
		if err != nil {
			return err
		}
		defer srv.Close()
	}
	log.Info("starting", "identity", id, "datastore", ds.Type, "datastoreKubeconfig", ds.Kubeconfig, "leakGrace", o.LeakGrace.String(), "resync", o.Resync.String(),
		"leaderElect", o.LeaderElect, "leaseNamespace", o.LeaseNamespace)
	if !c.Sync(ctx) {
		return nil // ctx ended
	}
	log.Info("informers synced")
	if !o.LeaderElect {
		c.Reconcile(ctx)
		return nil
	}
	return o.lead(ctx, c, client, id, health, log)
}

// logger is the JSON logger at --log-level writing to stderr; client-go
// logs through it too.
func (o Options) logger(stderr io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.LogLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", o.LogLevel)
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	klog.SetSlogLogger(log.With("component", "client-go"))
	return log, nil
}

// check refuses durations the controller cannot run with.
func (o Options) check() error {
	if o.LeakGrace < 0 {
		return fmt.Errorf("--leak-grace %v: must not be negative", o.LeakGrace)
	}
	if o.StickyTTL < 0 {
		return fmt.Errorf("--sticky-ttl %v: must not be negative", o.StickyTTL)
	}
	if o.Resync <= 0 {
		return fmt.Errorf("--resync %v: must be positive", o.Resync)
	}
	if o.LeaderElect && (o.LeaseDuration <= o.RenewDeadline || o.RenewDeadline <= o.RetryPeriod || o.RetryPeriod <= 0) {
		return fmt.Errorf("leader election needs --lease-duration (%v) > --renew-deadline (%v) > --retry-period (%v) > 0",
			o.LeaseDuration, o.RenewDeadline, o.RetryPeriod)
	}
	return nil
}

// apiClient is the Kubernetes client of the kubeconfig at path ("" for
// in-cluster), its requests counted in m.
func apiClient(path string, m *Metrics) (kubernetes.Interface, error) {
	restCfg, err := kubeConfig(path)
	if err != nil {
		return nil, err
	}
	restCfg.Wrap(m.CountRequests)
	restCfg.UserAgent = "ipkeeper-controller"
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return client, nil
}

// controller is the Controller of the datastore ds: stores that hold a
// connection (etcd, kubernetes) stay open between passes.
func (o Options) controller(ds config.Datastore, client kubernetes.Interface, m *Metrics, log *slog.Logger) (*Controller, error) {
	return New(Config{
		Client:    client,
		Open:      func(ctx context.Context) (store.Store, error) { return datastore.Open(ctx, ds, datastore.Options{}) },
		KeepOpen:  ds.Type == config.DatastoreEtcd || ds.Type == config.DatastoreKubernetes,
		LeakGrace: o.LeakGrace,
		StickyTTL: o.StickyTTL,
		Resync:    o.Resync,
		Log:       log,
		Metrics:   m,
	})
}

// startMap serves the address map on --map-addr, its leak candidates
// from c; the token defaults to the environment's.
func (o Options) startMap(ctx context.Context, c *Controller, ds config.Datastore, client kubernetes.Interface,
	log *slog.Logger, getenv func(string) string) (stop func(), err error) {
	token := o.MapToken
	if token == "" {
		token = getenv(webui.TokenEnv)
	}
	ml, err := c.NewMapLeaks()
	if err != nil {
		return nil, err
	}
	// On etcd the map shows the controller's view of the store: one watch
	// for both.
	sv, err := c.StoreView(ctx)
	if err != nil {
		log.Warn("the address map reads the datastore on its own: the controller's view of it did not start", "err", err)
	}
	return serveMap(ctx, mapConfig{addr: o.MapAddr, token: token, tokenReview: o.MapTokenReview,
		allow: o.MapAllow, ds: ds, view: sv, leaks: ml, client: client, log: log})
}

// lead stands for election of the Lease until ctx ends and reconciles
// while leading. A replica that loses the lease stops reconciling and
// stands for election again, with its informers still warm.
func (o Options) lead(ctx context.Context, c *Controller, client kubernetes.Interface, id string,
	health *leaderelection.HealthzAdaptor, log *slog.Logger) error {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: LeaseName, Namespace: o.LeaseNamespace},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			Name:            LeaseName,
			LeaseDuration:   o.LeaseDuration,
			RenewDeadline:   o.RenewDeadline,
			RetryPeriod:     o.RetryPeriod,
			ReleaseOnCancel: true,
			WatchDog:        health,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					log.Info("leading: reconciling", "identity", id)
					c.Reconcile(ctx)
				},
				OnStoppedLeading: func() { log.Info("not leading", "identity", id) },
				OnNewLeader: func(leader string) {
					if leader != id {
						log.Info("another replica leads", "leader", leader)
					}
				},
			},
		})
		if err != nil {
			return err
		}
		le.Run(ctx)
	}
	return nil
}

// identity names this replica in the Lease: the host (the pod's name in a
// cluster) and the process ID.
func identity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "ipkeeper-controller"
	}
	return fmt.Sprintf("%s_%d", host, os.Getpid())
}

// datastoreOf is the datastore of --config, else of the IPKEEPER_* env.
func datastoreOf(file string, getenv func(string) string) (config.Datastore, error) {
	if file != "" {
		conf, err := config.LoadFile(file)
		if err != nil {
			return config.Datastore{}, fmt.Errorf("--config: %w", err)
		}
		return conf.Datastore, nil
	}
	ds, err := config.DatastoreFromEnv(getenv)
	if err != nil {
		return ds, fmt.Errorf("datastore environment: %w", err)
	}
	return ds, nil
}

// datastoreCredentials sets the kubeconfig a kubernetes datastore is
// opened with: --datastore-kubeconfig when given, else the environment's
// IPKEEPER_DATASTORE_KUBECONFIG (the controller's own setting), else
// --kubeconfig ("" for in-cluster), as the agent uses its own credentials.
// A kubeconfig named in --config's datastore is never read: the file is
// the plugin's config list, and the path is the one the installer writes
// on each node for the node's ServiceAccount, which the controller's pod
// does not have and whose identity is not the controller's.
func (o Options) datastoreCredentials(ds config.Datastore, log *slog.Logger) (config.Datastore, error) {
	if ds.Type != config.DatastoreKubernetes {
		if o.DatastoreKubeconfig != "" {
			return ds, fmt.Errorf("--datastore-kubeconfig is set but the datastore is %q; it names the kubeconfig of a %q datastore", ds.Type, config.DatastoreKubernetes)
		}
		return ds, nil
	}
	switch {
	case o.DatastoreKubeconfig != "":
		p, err := filepath.Abs(o.DatastoreKubeconfig)
		if err != nil {
			return ds, fmt.Errorf("--datastore-kubeconfig %q: %w", o.DatastoreKubeconfig, err)
		}
		ds.Kubeconfig = p
	case o.ConfigFile == "" && ds.Kubeconfig != "":
		// IPKEEPER_DATASTORE_KUBECONFIG: the controller's environment.
	default:
		if ds.Kubeconfig != "" {
			log.Info("not reading the datastore kubeconfig of --config (the plugin's on the node); the controller uses its own credentials",
				"ignored", ds.Kubeconfig, "kubeconfig", o.Kubeconfig)
		}
		ds.Kubeconfig = o.Kubeconfig
	}
	return ds, nil
}

// kubeConfig loads a kubeconfig file, or the in-cluster config when path
// is "" (kube.RESTConfig: files another user could have written are
// refused).
func kubeConfig(path string) (*rest.Config, error) {
	cfg, err := kube.RESTConfig(path)
	if err != nil && path == "" {
		return nil, fmt.Errorf("no --kubeconfig and no usable in-cluster configuration: %w", err)
	}
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	// client-go's default (5 requests/s, bursts of 10) is shared by the
	// informers' watches, leader election, the stale-view check and
	// TokenReviews; a Lease renewal must never wait behind the others.
	cfg.QPS, cfg.Burst = apiQPS, apiBurst
	cfg.UserAgent = "ipkeeper-controller"
	return cfg, nil
}

// apiQPS and apiBurst bound the controller's own API requests.
const (
	apiQPS   = 50
	apiBurst = 100
)

// serve starts the HTTP server of /metrics, /healthz and /readyz, and
// with profiling of /debug/pprof/.
func serve(addr string, m *Metrics, c *Controller, health *leaderelection.HealthzAdaptor, profiling bool) (*http.Server, error) {
	mux := http.NewServeMux()
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if health != nil {
			if err := health.Check(r); err != nil {
				http.Error(w, "leader election: "+err.Error(), http.StatusInternalServerError)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !c.Ready() {
			http.Error(w, "informers have not listed pods and nodes yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return srv, nil
}
