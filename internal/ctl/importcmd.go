package ctl

import (
	"fmt"
	"io"
	"net/netip"
	"os"

	"github.com/spf13/cobra"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/importer"
	"github.com/ipkeeper/ipkeeper/internal/importer/calico"
	"github.com/ipkeeper/ipkeeper/internal/importer/whereabouts"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
)

type importView struct{ importer.Result }

func (v importView) table(w io.Writer) {
	counts := map[string]map[string]int{}
	for _, c := range v.Changes {
		if counts[c.Kind] == nil {
			counts[c.Kind] = map[string]int{}
		}
		counts[c.Kind][c.Status]++
	}
	mode := ""
	if v.DryRun {
		mode = " (dry run: nothing written)"
	}
	fmt.Fprintf(w, "%s import%s: %d addresses taken\n", v.Source, mode, len(v.Addresses))
	row(w, "KIND", "NAME", "STATUS")
	for _, c := range v.Changes {
		if c.Kind != "handle" {
			row(w, c.Kind, c.Name, c.Status)
		}
	}
	for _, st := range []string{importer.StatusCreated, importer.StatusWouldCreate, importer.StatusPresent} {
		if n := counts["handle"][st]; n > 0 {
			row(w, "handle", fmt.Sprintf("(%d handles)", n), st)
		}
	}
	for _, wn := range v.Warnings {
		fmt.Fprintln(w, "warning: "+wn)
	}
}

// readFiles reads every --file ("-" is standard input).
func (c *cli) readFiles(files []string) ([][]byte, error) {
	if len(files) == 0 {
		return nil, fmt.Errorf("--file is required")
	}
	var out [][]byte
	for _, f := range files {
		var b []byte
		var err error
		if f == "-" {
			b, err = io.ReadAll(c.env.Stdin)
		} else {
			b, err = os.ReadFile(f)
		}
		if err != nil {
			return nil, fmt.Errorf("--file: %w", err)
		}
		out = append(out, b)
	}
	return out, nil
}

// apply writes (or with dryRun only checks) a plan and prints the result.
func (c *cli) apply(cmd *cobra.Command, plan *importer.Plan, dryRun bool) error {
	return c.withStore(cmd.Context(), func(a *allocator.Allocator) error {
		res, err := importer.ApplyStore(cmd.Context(), a.Store(), plan, dryRun)
		if err != nil {
			return err
		}
		return c.print(importView{res})
	})
}

func (c *cli) importCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "import",
		Short: "Adopt another IPAM's allocations so running pods keep their addresses",
	}
	cmd.AddCommand(c.importCalicoCmd(), c.importWhereaboutsCmd())
	return cmd
}

func (c *cli) importCalicoCmd() *cobra.Command {
	var (
		files, poolCIDRs []string
		opts             calico.Options
		ec               etcd.Config
		dryRun           bool
	)
	cmd := &cobra.Command{
		Use:   "calico (--etcd-endpoints E | --file F)",
		Short: "Import Calico IPAM state from Calico's etcd or from etcdctl output",
		Long: `Import Calico's IPAM blocks, handles and host affinities (etcd keys under
/calico/ipam/v2/), either read from Calico's etcd (--etcd-endpoints, with
--etcd-ca/--etcd-cert/--etcd-key for TLS) or from files holding what
"etcdctl get --prefix /calico/ipam/v2/" prints (-w json too), or bare block
values.

Each Calico block keeps its node affinity and its free order. Blocks become
blocks of the pool named after the --pool-cidr (a Calico IPPool's CIDR)
holding them, or of a pool of their own ("calico-<cidr>"). Handle IDs
"<network>.<container ID>" become "<network>.<container ID>.<ifname>" so the
pods' CNI DEL finds them once ipkeeper is their IPAM; an allocation without
a handle stays taken by "calico-import.unknown.<addr>".

On this command --etcd-* name Calico's etcd; give ipkeeper's own datastore
with --config or the IPKEEPER_* environment. Running an import again
changes nothing; state that disagrees is refused, nothing written.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// An empty --ifname would otherwise mean the default: a name
			// no CNI DEL can send is refused, nothing read or written.
			if err := calico.CheckIfName(opts.IfName); err != nil {
				return fmt.Errorf("--ifname %q: %w", opts.IfName, err)
			}
			for _, s := range poolCIDRs {
				p, err := netip.ParsePrefix(s)
				if err != nil {
					return fmt.Errorf("--pool-cidr %q: %w", s, err)
				}
				opts.PoolCIDRs = append(opts.PoolCIDRs, p.Masked())
			}
			var kvs []calico.KV
			switch {
			case len(ec.Endpoints) > 0 && len(files) > 0:
				return fmt.Errorf("give either --etcd-endpoints or --file, not both (on import calico, --etcd-* name Calico's etcd: give ipkeeper's own etcd with --config or the IPKEEPER_* environment)")
			case len(ec.Endpoints) > 0:
				var err error
				if kvs, err = calico.ReadEtcd(cmd.Context(), ec); err != nil {
					return err
				}
			default:
				data, err := c.readFiles(files)
				if err != nil {
					return fmt.Errorf("%w (or --etcd-endpoints)", err)
				}
				for i, d := range data {
					got, err := calico.ParseFile(d)
					if err != nil {
						return fmt.Errorf("%s: %w", files[i], err)
					}
					kvs = append(kvs, got...)
				}
			}
			plan, err := calico.Plan(kvs, opts)
			if err != nil {
				return err
			}
			return c.apply(cmd, plan, dryRun)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&files, "file", nil, "file of Calico IPAM entries as etcdctl prints them (repeatable; - is stdin)")
	f.StringSliceVar(&ec.Endpoints, "etcd-endpoints", nil, "Calico's etcd endpoints")
	f.StringVar(&ec.CAFile, "etcd-ca", "", "CA file verifying Calico's etcd")
	f.StringVar(&ec.CertFile, "etcd-cert", "", "client certificate for Calico's etcd")
	f.StringVar(&ec.KeyFile, "etcd-key", "", "client key for Calico's etcd")
	f.StringSliceVar(&poolCIDRs, "pool-cidr", nil, "CIDR of a Calico IPPool: its blocks become one ipkeeper pool (repeatable)")
	f.StringVar(&opts.IfName, "ifname", "eth0", "interface name completing Calico's handle IDs (the pods' CNI_IFNAME)")
	f.BoolVar(&dryRun, "dry-run", false, "check and print what would be imported, write nothing")
	return cmd
}

func (c *cli) importWhereaboutsCmd() *cobra.Command {
	var (
		files  []string
		opts   whereabouts.Options
		dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "whereabouts --file F",
		Short: "Import whereabouts IPPools (kubectl get ippools.whereabouts.cni.cncf.io -A -o yaml)",
		Long: `Import the allocations of whereabouts IPPool objects, as
"kubectl get ippools.whereabouts.cni.cncf.io -A -o yaml" prints them.

Each IPPool becomes the pool a whereabouts-syntax network config with that
range resolves to (named like the IPPool), so the config finds it; its
range_start, range_end and exclusions are taken from that config on first
use. Handles are named "<network>.<container ID>.<ifname>", as the plugin
names them: the network is --network, else the name of a
NetworkAttachmentDefinition in the input whose whereabouts range is the
pool's (kubectl get net-attach-def -A -o yaml), else "whereabouts".

Running an import again changes nothing; state that disagrees is refused,
nothing written.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := c.readFiles(files)
			if err != nil {
				return err
			}
			plan, err := whereabouts.Plan(data, opts)
			if err != nil {
				return err
			}
			return c.apply(cmd, plan, dryRun)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&files, "file", nil, "YAML or JSON file of IPPool (and NetworkAttachmentDefinition) objects (repeatable; - is stdin)")
	f.StringVar(&opts.Network, "network", "", "CNI network name the pools' pods were attached with")
	f.IntVar(&opts.BlockSize, "block-size", 0, "the network config's blockSize, if it sets one")
	f.IntVar(&opts.BlockSizeV6, "ipv6-block-size", 0, "the network config's ipv6BlockSize, if it sets one")
	f.BoolVar(&dryRun, "dry-run", false, "check and print what would be imported, write nothing")
	return cmd
}
