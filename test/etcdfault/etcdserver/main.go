// Command etcdserver is etcd itself (etcdmain.Main), built from the module
// proxy so that fault tests can run etcd members as separate processes and
// kill them with SIGKILL. It is its own module so that the project does not
// depend on it.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
