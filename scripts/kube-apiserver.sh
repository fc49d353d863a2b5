#!/usr/bin/env bash
# Builds a real kube-apiserver for the Kubernetes tests, once per version,
# into the cache (scripts/kube-build.sh; cold ~14 min on 2 cores, then
# instant). Prints the binary's path.
#
#   scripts/kube-apiserver.sh            # default version
#   KUBE_VERSION=v1.37.1 scripts/kube-apiserver.sh
set -euo pipefail

exec "$(dirname "$0")/kube-build.sh" kube-apiserver <<'GO'
// Command kube-apiserver is the upstream API server, built for ipkeeper's tests.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
GO
