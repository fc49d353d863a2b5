#!/usr/bin/env bash
# Builds crictl (the CRI command-line client) from the Go module proxy,
# once per version, into a cache outside the checkout, for the real-node
# tests (test/node). Prints the binary's path.
#
#   scripts/crictl.sh                        # default version
#   CRICTL_VERSION=v1.37.0 scripts/crictl.sh
set -euo pipefail

CRICTL_VERSION=${CRICTL_VERSION:-v1.37.0}
CACHE_DIR=${IPKEEPER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ipkeeper}
OUT="$CACHE_DIR/crictl-$CRICTL_VERSION/crictl"

if [[ -x "$OUT" ]]; then
	echo "$OUT"
	exit 0
fi

echo "building crictl $CRICTL_VERSION into $OUT" >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS=-mod=mod go install -trimpath "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION" >&2
mkdir -p "$(dirname "$OUT")"
mv "$tmp/crictl" "$OUT"
echo "$OUT"
