// Command ipkeeper-controller reclaims leaked addresses: allocations of
// pods that are gone or finished, of deleted nodes and of older sandboxes,
// watching the Kubernetes API with informers, and serves the address map
// (a read-only web page of the datastore, leak candidates marked) on
// --map-addr. See internal/controller.
package main

import (
	"os"

	"github.com/ipkeeper/ipkeeper/internal/controller"
)

func main() {
	os.Exit(controller.Main(os.Args[1:], os.Stderr, os.Getenv))
}
