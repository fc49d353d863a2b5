package ctl

import (
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/ipkeeper/ipkeeper/internal/config"
)

// dsFlags are the global flags that choose the datastore.
type dsFlags struct {
	config    string
	typ       string
	localPath string
	endpoints []string
	ca        string
	cert      string
	key       string
	prefix    string
	// kubeconfig and partition choose a kubernetes datastore.
	kubeconfig string
	partition  string
	fs         *pflag.FlagSet
}

func (d *dsFlags) register(fs *pflag.FlagSet) {
	d.fs = fs
	fs.StringVar(&d.config, "config", "", "CNI network config (.conf or .conflist) whose ipkeeper datastore to use")
	fs.StringVar(&d.typ, "datastore", "", "datastore type: local, etcd or kubernetes")
	fs.StringVar(&d.localPath, "local-path", "", "directory of the local datastore (default /var/lib/cni/ipkeeper)")
	fs.StringSliceVar(&d.endpoints, "etcd-endpoints", nil, "etcd endpoints of ipkeeper's datastore (URLs or host:port, comma-separated)")
	fs.StringVar(&d.ca, "etcd-ca", "", "CA file verifying the etcd servers")
	fs.StringVar(&d.cert, "etcd-cert", "", "client certificate file for etcd")
	fs.StringVar(&d.key, "etcd-key", "", "client key file for etcd")
	fs.StringVar(&d.prefix, "etcd-prefix", "", "etcd key prefix of ipkeeper's datastore (default /ipkeeper)")
	fs.StringVar(&d.kubeconfig, "datastore-kubeconfig", "", "kubeconfig of the kubernetes datastore (default: in-cluster)")
	fs.StringVar(&d.partition, "datastore-prefix", "", "partition of the kubernetes datastore (a DNS label; default none)")
}

// datastore resolves the datastore: --config's, else the environment's,
// with the flags given on top, validated as the plugin validates it.
func (c *cli) datastore() (config.Datastore, error) {
	d := &c.ds
	var base config.Datastore
	if d.config != "" {
		conf, err := config.LoadFile(d.config)
		if err != nil {
			return base, fmt.Errorf("--config: %w", err)
		}
		c.conf, base = conf, conf.Datastore
	} else {
		var err error
		if base, err = config.DatastoreFromEnv(c.env.Getenv); err != nil {
			return base, err
		}
	}
	changed := func(name string) bool { return d.fs != nil && d.fs.Changed(name) }
	if changed("datastore") && d.typ != base.Type {
		// Another type: the base's settings belong to the other store.
		base = config.Datastore{Type: d.typ}
	}
	raw := map[string]any{"type": base.Type}
	set := func(k, v string) {
		if v != "" {
			raw[k] = v
		}
	}
	set("path", base.Path)
	set("caFile", base.CAFile)
	set("certFile", base.CertFile)
	set("keyFile", base.KeyFile)
	set("prefix", base.Prefix)
	set("kubeconfig", base.Kubeconfig)
	if len(base.Endpoints) > 0 {
		raw["endpoints"] = base.Endpoints
	}
	if base.DialTimeout > 0 {
		raw["dialTimeout"] = base.DialTimeout.String()
	}
	if base.RequestTimeout > 0 {
		raw["requestTimeout"] = base.RequestTimeout.String()
	}
	if changed("local-path") {
		p, err := filepath.Abs(d.localPath)
		if err != nil {
			return config.Datastore{}, fmt.Errorf("--local-path: %w", err)
		}
		raw["path"] = p
	}
	for _, f := range []struct {
		flag, key string
		val       *string
	}{{"etcd-ca", "caFile", &d.ca}, {"etcd-cert", "certFile", &d.cert}, {"etcd-key", "keyFile", &d.key}, {"etcd-prefix", "prefix", &d.prefix}} {
		if changed(f.flag) {
			raw[f.key] = *f.val
		}
	}
	if changed("datastore-kubeconfig") {
		p, err := filepath.Abs(d.kubeconfig)
		if err != nil || d.kubeconfig == "" {
			return config.Datastore{}, fmt.Errorf("--datastore-kubeconfig %q: want a kubeconfig file", d.kubeconfig)
		}
		raw["kubeconfig"] = p
	}
	if changed("datastore-prefix") {
		if base.Type != config.DatastoreKubernetes {
			return config.Datastore{}, fmt.Errorf("--datastore-prefix names the partition of a %q datastore, not of %q: use --etcd-prefix for etcd", config.DatastoreKubernetes, dsName(base.Type))
		}
		raw["prefix"] = d.partition
	}
	if changed("etcd-prefix") && base.Type == config.DatastoreKubernetes {
		return config.Datastore{}, fmt.Errorf("--etcd-prefix is set for a %q datastore: name its partition with --datastore-prefix", config.DatastoreKubernetes)
	}
	if changed("etcd-endpoints") {
		raw["endpoints"] = d.endpoints
	}
	js, err := json.Marshal(raw)
	if err != nil {
		return config.Datastore{}, err
	}
	ds, err := config.ParseDatastore(js)
	if err != nil {
		return ds, fmt.Errorf("datastore settings: %w", err)
	}
	return ds, nil
}
