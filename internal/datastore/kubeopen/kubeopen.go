// Package kubeopen links the Kubernetes datastore into a binary: importing
// it (for its side effect) lets datastore.Open open
// {"type": "kubernetes"} datastores. It is kept apart because client-go's
// package initialization costs every process that links it several times
// the plugin's own start-up (internal/store/kube/initcost measures it;
// docs/BENCHMARKS.md), which the plugin must not pay for local and etcd
// datastores.
package kubeopen

import (
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kube"
)

// Long-running processes (the controller, the admin CLI, the agent) list
// node objects and claims of a whole cluster: client-go's default rate
// limit (5 requests/s, bursts of 10) would make a pass over 1 000 nodes
// take minutes. The plugin makes a handful of requests and keeps the
// defaults.
const (
	sharedQPS   = 100
	sharedBurst = 200
)

func init() {
	datastore.RegisterKubernetes(func(ds config.Datastore, plugin bool) (store.Store, error) {
		cfg := kube.Config{Kubeconfig: ds.Kubeconfig, Prefix: ds.Prefix, Timeout: ds.RequestTimeout}
		if !plugin {
			cfg.QPS, cfg.Burst = sharedQPS, sharedBurst
		}
		return kube.Open(cfg)
	})
}
