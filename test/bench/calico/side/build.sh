#!/usr/bin/env bash
# Builds calicoside (main.go beside this script) against Calico's IPAM
# library, once per Calico version, into a cache outside the checkout, and
# prints the binary's path (a cached one is reused at once).
#
#   test/bench/calico/side/build.sh CALICO_SRC
#
# CALICO_SRC is a checkout of github.com/projectcalico/calico at
# CALICO_VERSION (default v3.32.1), or a git directory of that repository
# holding the tag. The Go module proxy serves neither that tag of
# github.com/projectcalico/calico nor any version of
# github.com/projectcalico/api (which its IPAM library imports), so the
# library comes from that source tree; every other dependency comes from the
# module proxy at the versions Calico's go.mod names, its replace lines
# included. The build happens in a throwaway module so the project's go.mod
# never takes on Calico.
set -euo pipefail

SRC=${1:?usage: build.sh CALICO_SRC (a calico checkout or git directory)}
CALICO_VERSION=${CALICO_VERSION:-v3.32.1}
CACHE_DIR=${IPKEEPER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ipkeeper}
OUT="$CACHE_DIR/calicoside-$CALICO_VERSION/calicoside"
here=$(cd "$(dirname "$0")" && pwd)

if [[ -x "$OUT" && "$OUT" -nt "$here/main.go" ]]; then
	echo "$OUT"
	exit 0
fi

tree="$CACHE_DIR/calicoside-$CALICO_VERSION/src"
if [[ ! -f "$tree/go.mod" ]]; then
	if [[ -f "$SRC/go.mod" && -d "$SRC/libcalico-go" ]]; then
		tree=$(cd "$SRC" && pwd)
	elif git --git-dir="$SRC" rev-parse -q --verify "refs/tags/$CALICO_VERSION" >/dev/null; then
		echo "extracting calico $CALICO_VERSION from $SRC into $tree" >&2
		rm -rf "$tree.tmp" && mkdir -p "$tree.tmp"
		git --git-dir="$SRC" archive "$CALICO_VERSION" go.mod go.sum api lib libcalico-go crypto |
			tar -x -C "$tree.tmp"
		mv "$tree.tmp" "$tree"
	else
		echo "build.sh: $SRC is neither a calico checkout nor a git directory with tag $CALICO_VERSION" >&2
		exit 1
	fi
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$here/main.go" "$work/main.go"
{
	echo "module ipkeeper.local/calicoside"
	echo
	echo "go 1.26"
	echo
	echo "require ("
	echo "	github.com/projectcalico/calico v0.0.0-00010101000000-000000000000"
	echo "	github.com/projectcalico/api v0.0.0-00010101000000-000000000000"
	echo ")"
	echo
	echo "replace ("
	echo "	github.com/projectcalico/calico => $tree"
	# Calico's own replace lines: local paths rebased onto the tree,
	# pinned versions as they are.
	sed -n '/^replace (/,/^)/p' "$tree/go.mod" | grep '=>' |
		sed -E "s#=> \./#=> $tree/#"
	echo ")"
} >"$work/go.mod"
cp "$tree/go.sum" "$work/go.sum"

echo "building calicoside against calico $CALICO_VERSION into $OUT" >&2
(
	cd "$work"
	go mod tidy >&2
	mkdir -p "$(dirname "$OUT")"
	go build -trimpath -ldflags "-X main.version=$CALICO_VERSION" -o "$OUT.tmp" . >&2
	mv "$OUT.tmp" "$OUT"
)
echo "$OUT"
