#!/usr/bin/env bash
# Builds a real kubelet for the real-node tests (test/node), once per
# version, into the cache (scripts/kube-build.sh; cold ~10-15 min on 2
# cores, less after the API server's build, then instant). Prints the
# binary's path.
#
#   scripts/kubelet.sh            # default version
#   KUBE_VERSION=v1.37.1 scripts/kubelet.sh
set -euo pipefail

exec "$(dirname "$0")/kube-build.sh" kubelet <<'GO'
// Command kubelet is the upstream node agent, built for ipkeeper's tests.
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	os.Exit(cli.Run(app.NewKubeletCommand(context.Background())))
}
GO
