// Command with is a binary that links the Kubernetes datastore and does
// nothing: with GODEBUG=inittrace=1 it shows the package-init cost every
// exec of a binary linking internal/store/kube pays (the plugin does, even
// for local or etcd datastores). Compare with ../without.
package main

import (
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kube"
)

var _ store.Store = (*kube.Store)(nil)

func main() {}
