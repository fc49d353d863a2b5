#!/usr/bin/env bash
# Builds containerd, its runc shim and ctr from the Go module proxy, once
# per version, into a cache outside the checkout, for the real-node tests
# (test/node). Prints the directory holding the three binaries.
#
#   scripts/containerd.sh                        # default version
#   CONTAINERD_VERSION=v2.4.2 scripts/containerd.sh
#
# Static builds without btrfs (no cgo headers needed). runc itself comes
# from the system (Debian's runc package: make sysdeps).
set -euo pipefail

CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.4.2}
CACHE_DIR=${IPKEEPER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ipkeeper}
OUT="$CACHE_DIR/containerd-$CONTAINERD_VERSION"
BINS=(containerd containerd-shim-runc-v2 ctr)

have=1
for b in "${BINS[@]}"; do [[ -x "$OUT/$b" ]] || have=0; done
if [[ $have == 1 ]]; then
	echo "$OUT"
	exit 0
fi

echo "building containerd $CONTAINERD_VERSION into $OUT" >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for b in "${BINS[@]}"; do
	CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS=-mod=mod go install -trimpath -tags no_btrfs \
		"github.com/containerd/containerd/v2/cmd/$b@$CONTAINERD_VERSION" >&2
done
mkdir -p "$OUT"
for b in "${BINS[@]}"; do mv "$tmp/$b" "$OUT/$b"; done
echo "$OUT"
