#!/usr/bin/env bash
# Builds one Kubernetes component NAME from the Go module proxy, once per
# version, into a cache outside the checkout, and prints the binary's path
# (a cached one is reused at once). The component's main package comes on
# standard input; scripts/kube-apiserver.sh and scripts/kubelet.sh call it.
#
#   scripts/kube-build.sh NAME <main.go
#   KUBE_VERSION=v1.37.1 scripts/kube-build.sh NAME <main.go
#
# The build happens in a throwaway module of its own so the project's go.mod
# never takes on k8s.io/kubernetes. Each staging module is pinned to the
# matching v0.X.Y, as k8s.io/kubernetes' own go.mod replaces them locally.
set -euo pipefail

NAME=${1:?usage: kube-build.sh NAME <main.go}
KUBE_VERSION=${KUBE_VERSION:-v1.37.1}
CACHE_DIR=${IPKEEPER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ipkeeper}
OUT="$CACHE_DIR/$NAME-$KUBE_VERSION/$NAME"

if [[ -x "$OUT" ]]; then
	echo "$OUT"
	exit 0
fi

staging_version="v0.${KUBE_VERSION#v1.}"
minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cat >"$work/main.go"
modfile=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" |
	sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
{
	echo "module ipkeeper.local/$NAME"
	echo
	echo "go 1.26"
	echo
	echo "require k8s.io/kubernetes $KUBE_VERSION"
	echo
	echo "replace ("
	sed -n '/^replace (/,/^)/p' "$modfile" | grep '=> ./staging/' |
		sed -E "s#^[[:space:]]*([^ ]+) => .*#\t\1 => \1 $staging_version#"
	echo ")"
} >"$work/go.mod"

echo "building $NAME $KUBE_VERSION into $OUT (cold: 10-15 min on 2 cores)" >&2
(
	cd "$work"
	go mod tidy >&2
	ld="-X k8s.io/component-base/version.gitVersion=$KUBE_VERSION"
	ld+=" -X k8s.io/component-base/version.gitMajor=1"
	ld+=" -X k8s.io/component-base/version.gitMinor=$minor"
	ld+=" -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION"
	mkdir -p "$(dirname "$OUT")"
	go build -trimpath -ldflags "$ld" -o "$OUT.tmp" . >&2
	mv "$OUT.tmp" "$OUT"
)
echo "$OUT"
