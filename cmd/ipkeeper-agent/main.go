// Command ipkeeper-agent runs on every node (DaemonSet ipkeeper-node) and
// answers the ipkeeper plugin's pod-aware lookups from informer caches
// over a unix socket (ipam.kubernetes.agentSocket). See internal/agent.
package main

import (
	"os"

	"github.com/ipkeeper/ipkeeper/internal/agent"
)

func main() {
	os.Exit(agent.Main(os.Args[1:], os.Stderr, os.Getenv))
}
