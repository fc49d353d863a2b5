// Package ctl is ipkeeperctl, the admin CLI: pools, utilization, lookups,
// release, consistency check and repair, GC and import. Every verb opens
// the datastore, does its work and closes it again (the local store holds
// a file lock while open), and prints its result as a table for a person
// or as JSON or YAML for scripts (-o).
package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	// The kubernetes datastore: the CLI links client-go anyway (leaks).
	_ "github.com/ipkeeper/ipkeeper/internal/datastore/kubeopen"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// Exit statuses.
const (
	// ExitOK: the command did what it was asked; check found nothing.
	ExitOK = 0
	// ExitError: the command failed (bad flags, datastore unreachable,
	// a refused release or removal, an import conflict).
	ExitError = 1
	// ExitProblems: check found problems that are still there (without
	// --repair, or that --repair could not fix).
	ExitProblems = 2
	// ExitRepaired: check --repair found problems and fixed all of them.
	ExitRepaired = 3
)

// Env is what a run of the CLI takes from the outside world; tests replace
// parts of it.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Getenv reads the environment (IPKEEPER_*, NODENAME, ...).
	Getenv func(string) string
	// Hostname is the last fallback for the node name.
	Hostname func() (string, error)
	// Open opens the typed datastore (default datastore.Open of a
	// long-running process: the CLI never takes the node lock plugin calls
	// serialize on; a local or etcd store of the first layout is migrated
	// first).
	Open func(ctx context.Context, ds config.Datastore) (store.Store, error)
	// Exists reports whether a path exists, for the netns of a handle.
	Exists func(path string) bool
}

// OSEnv is the environment of the running process.
func OSEnv() Env {
	return Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv, Hostname: os.Hostname,
		Open: openStore, Exists: pathExists}
}

func openStore(ctx context.Context, ds config.Datastore) (store.Store, error) {
	return datastore.Open(ctx, ds, datastore.Options{})
}

func pathExists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// Main runs ipkeeperctl with args (without the program name) and returns
// the exit status. SIGINT and SIGTERM cancel the running command.
func Main(args []string, env Env) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, args, env)
}

// exitError carries an exit status other than ExitError.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// errSilent ends a command with a non-zero status after it printed its
// result (check with problems).
var errSilent = errors.New("")

// Run is Main with a context of the caller's.
func Run(ctx context.Context, args []string, env Env) int {
	def := OSEnv()
	if env.Stdin == nil {
		env.Stdin = def.Stdin
	}
	if env.Stdout == nil {
		env.Stdout = def.Stdout
	}
	if env.Stderr == nil {
		env.Stderr = def.Stderr
	}
	if env.Getenv == nil {
		env.Getenv = def.Getenv
	}
	if env.Hostname == nil {
		env.Hostname = def.Hostname
	}
	if env.Open == nil {
		env.Open = def.Open
	}
	if env.Exists == nil {
		env.Exists = def.Exists
	}
	c := &cli{env: env}
	root := c.root()
	root.SetArgs(args)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if !errors.Is(ee.err, errSilent) {
			fmt.Fprintln(env.Stderr, "Error:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(env.Stderr, "Error:", err)
	return ExitError
}

// cli holds the global flags and the environment of one run.
type cli struct {
	env    Env
	output string
	node   string
	ds     dsFlags
	// conf is the network config --config named, once loaded.
	conf *config.IPAM
}

func (c *cli) root() *cobra.Command {
	root := &cobra.Command{
		Use:   "ipkeeperctl",
		Short: "Administer ipkeeper's address space: pools, utilization, lookups, release, check, gc, import",
		Long: `ipkeeperctl administers ipkeeper's address space without hand-editing
datastore objects.

The datastore is the one --config names (a CNI .conf or .conflist using the
ipkeeper IPAM plugin), else the one IPKEEPER_DATASTORE, IPKEEPER_LOCAL_PATH,
IPKEEPER_ETCD_ENDPOINTS, IPKEEPER_ETCD_CA, IPKEEPER_ETCD_CERT,
IPKEEPER_ETCD_KEY, IPKEEPER_ETCD_PREFIX, IPKEEPER_DATASTORE_KUBECONFIG and
IPKEEPER_DATASTORE_PREFIX describe, else the local store at
/var/lib/cni/ipkeeper. The --datastore, --local-path, --etcd-* and
--datastore-kubeconfig/--datastore-prefix flags override either.

Exit status: 0 success, 1 failure; check: 0 nothing found, 2 problems
found (and left), 3 problems found and all repaired.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			switch c.output {
			case "table", "json", "yaml":
				return nil
			}
			return fmt.Errorf("-o %q: want table, json or yaml", c.output)
		},
	}
	pf := root.PersistentFlags()
	pf.StringVarP(&c.output, "output", "o", "table", "output format: table, json or yaml")
	pf.StringVar(&c.node, "node", "", "this node's name (default: the config's nodeName, $NODENAME, $KUBERNETES_NODE_NAME, the hostname)")
	c.ds.register(pf)
	root.AddCommand(c.poolCmd(), c.showCmd(), c.ipCmd(), c.blockCmd(), c.checkCmd(), c.gcCmd(), c.importCmd(), c.leaksCmd())
	root.AddCommand(c.uiCmd(), c.routesCmd(), c.reserveCmd())
	return root
}

// withStore opens the datastore, runs f and closes the store again.
func (c *cli) withStore(ctx context.Context, f func(a *allocator.Allocator) error) error {
	ds, err := c.datastore()
	if err != nil {
		return err
	}
	st, err := c.env.Open(ctx, ds)
	if err != nil {
		return fmt.Errorf("open %s datastore: %w", ds.Type, err)
	}
	err = f(allocator.New(st, nil))
	if cerr := st.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return err
}

// nodeName is --node, else the config's node name, else the plugin's
// defaults.
func (c *cli) nodeName() (string, error) {
	if c.node != "" {
		return c.node, nil
	}
	if c.conf != nil && c.conf.NodeName != "" {
		return c.conf.NodeName, nil
	}
	for _, k := range []string{"NODENAME", "KUBERNETES_NODE_NAME"} {
		if v := c.env.Getenv(k); v != "" {
			return v, nil
		}
	}
	h, err := c.env.Hostname()
	if err != nil || h == "" {
		return "", fmt.Errorf("no node name: pass --node (hostname: %v)", err)
	}
	return h, nil
}
