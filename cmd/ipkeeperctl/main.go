// Command ipkeeperctl is ipkeeper's admin CLI: pools, utilization,
// lookups, release, consistency check and repair, GC and import. See
// internal/ctl.
package main

import (
	"os"

	"github.com/ipkeeper/ipkeeper/internal/ctl"
)

func main() {
	os.Exit(ctl.Main(os.Args[1:], ctl.OSEnv()))
}
