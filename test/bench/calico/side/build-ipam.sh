#!/usr/bin/env bash
# Builds Calico's CNI IPAM plugin, calico-ipam, once per Calico version,
# into a cache outside the checkout, and prints the binary's path (a cached
# one is reused at once).
#
#   test/bench/calico/side/build-ipam.sh CALICO_SRC
#
# CALICO_SRC is as for build.sh beside this script: a checkout of
# github.com/projectcalico/calico at CALICO_VERSION (default v3.32.1), or a
# git directory of that repository holding the tag. The binary is Calico's
# own main package, cni-plugin/cmd/calico, built in Calico's own module
# (a copy of the tree in the cache, never the project's module) the way
# Calico's Makefile builds it: CGO_ENABLED=0, the version stamped into
# pkg/buildinfo. That binary picks its role from the name it runs under, so
# it is installed as calico-ipam. Dependencies other than the tree come from
# the module proxy at the versions Calico's go.mod names.
set -euo pipefail

SRC=${1:?usage: build-ipam.sh CALICO_SRC (a calico checkout or git directory)}
CALICO_VERSION=${CALICO_VERSION:-v3.32.1}
CACHE_DIR=${IPKEEPER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ipkeeper}
OUT="$CACHE_DIR/calico-ipam-$CALICO_VERSION/calico-ipam"

if [[ -x "$OUT" ]]; then
	echo "$OUT"
	exit 0
fi

# The directories of the tree that cni-plugin/cmd/calico imports from.
dirs=(go.mod go.sum api cni-plugin crypto lib libcalico-go pkg)
tree="$CACHE_DIR/calico-ipam-$CALICO_VERSION/src"
if [[ ! -f "$tree/go.mod" ]]; then
	if [[ -f "$SRC/go.mod" && -d "$SRC/cni-plugin/cmd/calico" ]]; then
		tree=$(cd "$SRC" && pwd)
	elif git --git-dir="$SRC" rev-parse -q --verify "refs/tags/$CALICO_VERSION" >/dev/null; then
		echo "extracting calico $CALICO_VERSION from $SRC into $tree" >&2
		rm -rf "$tree.tmp" && mkdir -p "$tree.tmp"
		git --git-dir="$SRC" archive "$CALICO_VERSION" "${dirs[@]}" | tar -x -C "$tree.tmp"
		mv "$tree.tmp" "$tree"
	else
		echo "build-ipam.sh: $SRC is neither a calico checkout nor a git directory with tag $CALICO_VERSION" >&2
		exit 1
	fi
fi

echo "building calico-ipam $CALICO_VERSION into $OUT" >&2
mkdir -p "$(dirname "$OUT")"
(
	cd "$tree"
	CGO_ENABLED=0 go build -trimpath -buildvcs=false \
		-ldflags "-X github.com/projectcalico/calico/pkg/buildinfo.Version=$CALICO_VERSION" \
		-o "$OUT.tmp" ./cni-plugin/cmd/calico >&2
)
mv "$OUT.tmp" "$OUT"
echo "$OUT"
