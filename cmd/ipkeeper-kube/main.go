// Command ipkeeper-kube is the ipkeeper CNI IPAM plugin with the
// kubernetes datastore linked. The ipkeeper plugin hands every config
// that keeps its state in the Kubernetes API to it (it is installed next
// to the plugin), so that local and etcd users do not pay client-go's
// start-up on every exec.
package main

import (
	_ "github.com/ipkeeper/ipkeeper/internal/datastore/kubeopen"
	"github.com/ipkeeper/ipkeeper/internal/plugin"
)

func main() { plugin.Main("ipkeeper CNI IPAM plugin (kubernetes datastore)") }
